package verify

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/pglock"
	"github.com/dlock-go/dlock/redislock"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// OpResize is a history's operation that changes a semaphore's size (Value)
// for every Client (Client.Resize), made by the test process during runs of a
// Spec with Resize set.
const OpResize = "resize"

// semResize is the scenarios' lock kind of the semaphore that is resized during
// the run: its size moves among 1 to N+1 while the workers, made with N
// permits, hold and wait.
const semResize = "sem+resize"

// resizer changes the size of the semaphore's keys at random, from c.Seed, until
// ctx ends: every 200 to 800 ms one key gets a size from 1 to N+1. It talks to
// the store directly (the faults are the workers'), through a Client that
// adopts the stored size, and records each resize.
func resizer(ctx context.Context, t testing.TB, c Config, st *store, rec *Recorder) {
	sem, closeFn, err := resizeClient(c, st)
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

// resizeClient returns a semaphore Client of the store of c that adopts the
// stored size, over a connection of its own, and the function that closes it.
func resizeClient(c Config, st *store) (*dlock.Client, func(), error) {
	switch {
	case st.pg != nil:
		pool, err := pgxpool.New(context.Background(), st.pg.URL)
		if err != nil {
			return nil, nil, err
		}
		s, err := pglock.NewSemaphoreDriver(pool, pglock.StoredSize, pglock.WithCreateTable())
		if err == nil {
			var cl *dlock.Client
			cl, err = dlock.NewClient(s)
			return cl, pool.Close, err
		}
		pool.Close()
		return nil, nil, err
	case len(st.servers) == 1:
		rdb := redis.NewClient(&redis.Options{Addr: st.servers[0].Addr})
		cl, err := redislock.NewSemaphore(rdb, redislock.StoredSize)
		return cl, func() { rdb.Close() }, err
	}
	return nil, nil, fmt.Errorf("%w: verify: resizes on %s need one server", dlock.ErrInvalid, c.Spec.Backend)
}

// resizeOp is a resize of the history: its invocation and completion (Info
// when its outcome is unknown).
type resizeOp struct{ inv, end Event }

// sizeDuring returns the largest size of the semaphore key that may have been
// in force at some instant of [x, y]: the size set by the last resize known to
// have completed before x (N when none), and that of every resize that may
// have taken effect within it (one of unknown outcome from its invocation on,
// until a resize invoked more than resizeLand after it returned completed).
func (a *Analysis) sizeDuring(key string, x, y int64) int {
	size := a.P.N
	rs := a.resizes[key]
	for _, r := range rs {
		if r.end.Type == OK && r.end.T <= x {
			size = int(r.end.Value)
		}
	}
	most := size
	for _, r := range rs {
		settled := r.end.Type == OK && r.end.T <= x || a.overridden(rs, r, x)
		if r.inv.T <= y && !settled {
			most = max(most, int(r.inv.Value))
		}
	}
	return most
}

// resizeLand is how long after a resize of unknown outcome returned it may
// still land: its request, sent before, on a connection the faults do not
// touch, is executed by then or never.
const resizeLand = 2 * time.Second

// overridden reports whether the resize r, of unknown outcome, can no
// longer be in force at x: a resize invoked more than resizeLand after r
// returned completed by x.
func (a *Analysis) overridden(rs []resizeOp, r resizeOp, x int64) bool {
	if r.end.Type != Info || r.end.T == math.MaxInt64 {
		return false
	}
	for _, o := range rs {
		if o.end.Type == OK && o.inv.T > r.end.T+int64(resizeLand) && o.end.T <= x {
			return true
		}
	}
	return false
}

// sortResizes orders each key's resizes by invocation.
func (a *Analysis) sortResizes() {
	for _, rs := range a.resizes {
		sort.Slice(rs, func(i, j int) bool { return rs[i].inv.T < rs[j].inv.T })
	}
}

// semLimit returns the most holders a semaphore may have had when b was
// granted, over holders valid at its completion: the largest size in force
// from the earliest moment the last of them can have been granted (b's
// invocation, or that of a holder that completed after it) to b's completion.
func (a *Analysis) semLimit(key string, b *grant, over []*grant) int {
	if len(a.resizes[key]) == 0 {
		return a.P.N
	}
	x := b.inv.T
	for _, g := range over {
		if g.ok.T > b.inv.T {
			x = min(x, g.inv.T)
		}
	}
	return a.sizeDuring(key, x, b.ok.T)
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

// lastResize returns the last resize of key invoked before t, or nil.
func (a *Analysis) lastResize(key string, t int64) *resizeOp {
	var last *resizeOp
	for i, r := range a.resizes[key] {
		if r.inv.T < t {
			last = &a.resizes[key][i]
		}
	}
	return last
}
