package redislock_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testproxy"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// tokenKind is one of the Redis token sources: take returns the token of a new
// grant of key on rdb (a lease for the locks, a version for the optimistic
// value), and a function that ends the lease (nil when there is none).
type tokenKind struct {
	name string
	take func(t *testing.T, rdb *redis.Client, key string) (uint64, func())
}

// leaseKind is a tokenKind whose tokens come from a Client's TryLock.
func leaseKind(name string, client func(rdb *redis.Client) (*redislock.Client, error)) tokenKind {
	return tokenKind{name: name, take: func(t *testing.T, rdb *redis.Client, key string) (uint64, func()) {
		t.Helper()
		c, err := client(rdb)
		if err != nil {
			t.Fatal(err)
		}
		l, err := c.TryLock(context.Background(), key, dlock.WithTTL(20*time.Second))
		if err != nil {
			t.Fatalf("%s TryLock: %v", name, err)
		}
		return l.Token(), func() { _ = l.Unlock(context.Background()) }
	}}
}

// tokenKinds are every token source of the Redis backend.
var tokenKinds = []tokenKind{
	leaseKind("plain", func(rdb *redis.Client) (*redislock.Client, error) { return redislock.New(rdb) }),
	leaseKind("fair", func(rdb *redis.Client) (*redislock.Client, error) { return redislock.NewFair(rdb) }),
	leaseKind("reentrant", func(rdb *redis.Client) (*redislock.Client, error) { return redislock.NewReentrant(rdb) }),
	leaseKind("rw", func(rdb *redis.Client) (*redislock.Client, error) {
		m, err := redislock.NewRWMutex(rdb)
		if err != nil {
			return nil, err
		}
		return m.Client, nil
	}),
	leaseKind("semaphore", func(rdb *redis.Client) (*redislock.Client, error) { return redislock.NewSemaphore(rdb, 1) }),
	{name: "optimistic", take: func(t *testing.T, rdb *redis.Client, key string) (uint64, func()) {
		t.Helper()
		o, err := redislock.NewOptimistic(rdb, 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		v, err := o.Update(context.Background(), key, func(redislock.Versioned) (string, error) { return "x", nil }, nil)
		if err != nil {
			t.Fatalf("optimistic Update: %v", err)
		}
		return v.Version, nil
	}},
}

// TestTokenAboveGrantLostInACrash: a grant whose write a crash lost (the last
// save was before it) does not hand its token out again: the next grant after the
// restart draws a larger one, although the saved state is that of the release
// before it.
func TestTokenAboveGrantLostInACrash(t *testing.T) {
	for _, k := range tokenKinds {
		t.Run(k.name, func(t *testing.T) {
			server := testserver.StartRedis(t, "--save", "3600 1")
			rdb := newRDB(t, server.Addr)
			ctx := context.Background()
			key := dlocktest.Key(t)
			if _, end := k.take(t, rdb, key); end != nil {
				end()
			}
			if err := rdb.Save(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			a, end := k.take(t, rdb, key)
			if err := server.Restart(); err != nil { // SIGKILL: the grant of a is lost
				t.Fatal(err)
			}
			b, endB := k.take(t, rdb, key)
			if end != nil {
				end()
			}
			if endB != nil {
				endB()
			}
			if b <= a {
				t.Fatalf("token %d after the crash, not above the lost grant's %d", b, a)
			}
		})
	}
}

// TestTokenAboveGrantLostInAFailover: a replica that has every write but the last
// grant's is promoted; the grant it never saw does not hand its token out again.
func TestTokenAboveGrantLostInAFailover(t *testing.T) {
	for _, k := range tokenKinds {
		t.Run(k.name, func(t *testing.T) {
			master := testserver.StartRedis(t, noSyncDelay...)
			link := testproxy.Start(t, master.Addr)
			replica := startReplicaOf(t, link.Addr)
			rdb, rrdb := newRDB(t, master.Addr), newRDB(t, replica.Addr)
			ctx := context.Background()
			key := dlocktest.Key(t)
			if _, end := k.take(t, rdb, key); end != nil {
				end()
			}
			if n, err := rdb.Wait(ctx, 1, 10*time.Second).Result(); err != nil || n != 1 {
				t.Fatalf("WAIT 1: %d replicas, %v", n, err)
			}
			link.Blackhole(testproxy.Downstream, true) // the next grant does not replicate
			a, end := k.take(t, rdb, key)
			master.Stop()
			if err := rrdb.ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
				t.Fatal(err)
			}
			b, endB := k.take(t, rrdb, key)
			if end != nil {
				end()
			}
			if endB != nil {
				endB()
			}
			if b <= a {
				t.Fatalf("token %d after the failover, not above the lost grant's %d", b, a)
			}
		})
	}
}

// TestPlainLockForeignFenceCounter: a plain lock's fence counter that holds no
// dlock counter (not a number, or a number no token can follow exactly) is
// foreign data: the acquisition fails with ErrConflict, not with a token drawn
// as if it were not there, nor with a token that does not fit.
func TestPlainLockForeignFenceCounter(t *testing.T) {
	rdb := newRDB(t, srv.Addr)
	c, err := redislock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, v := range []string{"abc", "12x", "-5", "1.5", "9223372036854775809", "18446744073709551615", "9007199254740993"} {
		key := dlocktest.Key(t) + ":" + v
		if err := rdb.Set(ctx, redislock.FenceKey(key), v, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		for _, free := range []bool{true, false} {
			if !free {
				// A released record is there: the counter is still read.
				rec := "-" + strconv.FormatUint(1_000_000, 36)
				if err := rdb.Set(ctx, redislock.LockKey(key), rec, time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
			}
			l, err := c.TryLock(ctx, key)
			if err == nil {
				_ = l.Unlock(ctx)
				t.Errorf("fence counter %q (record there: %v): granted token %d, want ErrConflict", v, !free, l.Token())
			} else if !errors.Is(err, dlock.ErrConflict) {
				t.Errorf("fence counter %q (record there: %v): %v, want ErrConflict", v, !free, err)
			}
		}
		if got := rdb.Get(ctx, redislock.FenceKey(key)).Val(); got != v {
			t.Errorf("fence counter %q became %q", v, got)
		}
	}
}
