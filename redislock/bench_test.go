package redislock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/redis/go-redis/v9"
)

var rawRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

// BenchmarkTryLockUnlock is one uncontended TryLock + Unlock cycle (two round
// trips), with a fixed TTL so that no watchdog runs.
func BenchmarkTryLockUnlock(b *testing.B) {
	benchCycle(b, (*dlock.Client).TryLock)
}

// BenchmarkLockUnlock is one uncontended Lock + Unlock cycle, as
// BenchmarkTryLockUnlock.
func BenchmarkLockUnlock(b *testing.B) {
	benchCycle(b, (*dlock.Client).Lock)
}

func benchCycle(b *testing.B, lock func(*dlock.Client, context.Context, string, ...dlock.Option) (*dlock.Lease, error)) {
	c := newClient(b, dlock.WithTTL(10*time.Second))
	key := dlocktest.Key(b)
	ctx := context.Background()
	for b.Loop() {
		l, err := lock(c, ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRawSetNXDel is the baseline: SET NX PX and a compare-and-delete script.
func BenchmarkRawSetNXDel(b *testing.B) {
	rdb := newRDB(b, srv.Addr)
	key := dlocktest.Key(b)
	ctx := context.Background()
	for b.Loop() {
		ok, err := rdb.SetNX(ctx, key, "owner", 10*time.Second).Result()
		if err != nil || !ok {
			b.Fatal(ok, err)
		}
		if err := rawRelease.Run(ctx, rdb, []string{key}, "owner").Err(); err != nil {
			b.Fatal(err)
		}
	}
}
