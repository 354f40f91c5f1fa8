package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

func newSyncDriver(t testing.TB) dlock.SyncDriver {
	d, err := redislock.NewSyncDriver(newRDB(t, srv.Addr))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestSyncConformance(t *testing.T) {
	dlocktest.RunSync(t, dlocktest.SyncBackend{
		New: newSyncDriver,
		TTL: 300 * time.Millisecond,
		Occupy: func(t testing.TB, name string) func() bool {
			rdb := newRDB(t, srv.Addr)
			ctx := context.Background()
			keys := []string{redislock.LatchKey(name), redislock.BarrierKey(name)}
			for _, k := range keys {
				if err := rdb.RPush(ctx, k, "a").Err(); err != nil {
					t.Fatal(err)
				}
			}
			t.Cleanup(func() { rdb.Del(ctx, keys...) })
			return func() bool {
				for _, k := range keys {
					if v, err := rdb.LRange(ctx, k, 0, -1).Result(); err != nil || len(v) != 1 {
						return false
					}
				}
				return true
			}
		},
	})
}

// TestSyncClusterConformance runs the latch and barrier suite through a
// *redis.ClusterClient on a three-master cluster: each latch and barrier lives
// in its name's slot, and its waiters listen with sharded pub/sub.
func TestSyncClusterConformance(t *testing.T) {
	cluster := testserver.StartCluster(t, 3)
	dlocktest.RunSync(t, dlocktest.SyncBackend{
		TTL: 300 * time.Millisecond,
		New: func(t testing.TB) dlock.SyncDriver {
			rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = rdb.Close() })
			d, err := redislock.NewSyncDriver(rdb)
			if err != nil {
				t.Fatal(err)
			}
			return d
		},
	})
}

// TestLatchWaiterIsNotified checks that a waiting Wait is woken by the
// count-down's message, well before its re-read without news.
func TestLatchWaiterIsNotified(t *testing.T) {
	name := dlocktest.Key(t)
	l, err := redislock.NewLatch(newRDB(t, srv.Addr), name, 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb := newRDB(t, srv.Addr)
	// The waiter is subscribed once the channel has a subscriber.
	errc := make(chan error, 1)
	go func() { errc <- l.Wait(ctx) }()
	testserver.Eventually(t, 10*time.Second, "the waiter subscribes", func() bool {
		n, err := rdb.PubSubNumSub(ctx, redislock.Prefix+"{"+name+"}:sync").Result()
		return err == nil && n[redislock.Prefix+"{"+name+"}:sync"] == 1
	})
	counter, err := redislock.NewLatch(rdb, name, 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := counter.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Wait returned %v after the count-down", d)
	}
}

func TestSyncNilClient(t *testing.T) {
	if _, err := redislock.NewLatch(nil, "x", 1, time.Minute); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("NewLatch(nil): %v", err)
	}
	if _, err := redislock.NewBarrier((*redis.Client)(nil), "x", 1, time.Minute); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("NewBarrier(nil): %v", err)
	}
}
