package verify

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// semResize is the scenarios' lock kind of the semaphore that is resized during
// the run: its size moves among 1 to N+1 while the workers, made with N
// permits, hold and wait.
const semResize = "sem+resize"

// resizer changes the size of the semaphore's keys at random, from c.Seed, until
// ctx ends: every 200 to 800 ms one key gets a size from 1 to N+1. It talks to
// the store directly (the faults are the workers'), through a Client that
// adopts the stored size, and records each resize.
func resizer(ctx context.Context, t testing.TB, c Config, b *backend, st *store, rec *Recorder) {
	if b.resize == nil {
		t.Errorf("verify: no resizes on %s", b.name)
		return
	}
	sem, closeFn, err := b.resize(c, st)
	if err != nil {
		t.Errorf("verify: the resizer's client: %v", err)
		return
	}
	defer closeFn()
	rng := rand.New(rand.NewPCG(c.Seed, 0x72657a))
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(200*time.Millisecond + time.Duration(rng.Int64N(int64(600*time.Millisecond)))):
		}
		key := c.Spec.Keys[rng.IntN(len(c.Spec.Keys))]
		n := 1 + rng.IntN(c.Spec.N+1)
		id := rec.NextID()
		rec.Record(Event{Op: OpResize, Type: Invoke, ID: id, Key: key, Value: int64(n)})
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := sem.Resize(rctx, key, n)
		cancel()
		switch {
		case err == nil:
			rec.Record(Event{Op: OpResize, Type: OK, ID: id, Key: key, Value: int64(n)})
		default: // the outcome is unknown: it may land
			rec.Record(Event{Op: OpResize, Type: Info, ID: id, Key: key, Value: int64(n), Err: err.Error()})
		}
	}
}

// noSizeScript makes the semaphore KEYS[1] (its lock hash) look as if it had
// never been resized: it deletes its stored size KEYS[2] and writes ARGV[1],
// the Client's size, as the holders' size.
var noSizeScript = redis.NewScript(`
if redis.call('HEXISTS', KEYS[1], 'n') == 1 then
  redis.call('HSET', KEYS[1], 'n', ARGV[1])
end
redis.call('DEL', KEYS[2])
return 0`)

// noSizeClient returns the semaphore Client of the variant nosize: it ignores
// the size stored by resizes, and takes permits under n, the size it was made
// with.
func noSizeClient(rdb *redis.Client, n int) (*dlock.Client, error) {
	d, err := redislock.NewSemaphoreDriver(rdb, n)
	if err != nil {
		return nil, err
	}
	return dlock.NewClient(&noSize{SemaphoreDriver: d, rdb: rdb, n: n})
}

// noSize is a semaphore driver that ignores the stored size.
type noSize struct {
	*redislock.SemaphoreDriver
	rdb *redis.Client
	n   int
}

// Acquire forgets the key's stored size, then takes a permit.
func (b *noSize) Acquire(ctx context.Context, r driver.AcquireRequest) (driver.Grant, error) {
	keys := []string{redislock.LockKey(r.Key), redislock.SizeKey(r.Key)}
	if err := noSizeScript.Run(ctx, b.rdb, keys, b.n).Err(); err != nil {
		return driver.Grant{}, fmt.Errorf("%w: %w", dlock.ErrUnavailable, err)
	}
	return b.SemaphoreDriver.Acquire(ctx, r)
}
