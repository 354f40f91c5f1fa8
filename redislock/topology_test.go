package redislock_test

import (
	"context"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// TestClusterConformance runs the whole suite through a *redis.ClusterClient on a
// three-master cluster: every script touches one hash slot only.
func TestClusterConformance(t *testing.T) {
	cluster := testserver.StartCluster(t, 3)
	dlocktest.Run(t, dlocktest.Backend{
		New: func(t testing.TB, opts ...dlock.Option) dlock.Locker {
			rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = rdb.Close() })
			c, err := redislock.New(rdb, opts...)
			if err != nil {
				t.Fatal(err)
			}
			return c
		},
		Occupy: func(t testing.TB, key string) func() bool {
			rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()})
			t.Cleanup(func() { _ = rdb.Close() })
			k := redislock.LockKey(key)
			ctx := context.Background()
			rdb.Set(ctx, k, "foreign", 0)
			return func() bool { return rdb.Get(ctx, k).Val() == "foreign" && rdb.PTTL(ctx, k).Val() < 0 }
		},
	})
}

// TestSentinelFailoverClient locks through a Sentinel-managed master.
func TestSentinelFailoverClient(t *testing.T) {
	master := testserver.StartRedis(t)
	s := testserver.StartSentinel(t, master)
	dlocktest.Run(t, dlocktest.Backend{
		New: func(t testing.TB, opts ...dlock.Option) dlock.Locker {
			rdb := redis.NewFailoverClient(&redis.FailoverOptions{
				MasterName: s.MasterName, SentinelAddrs: []string{s.Addr}, ContextTimeoutEnabled: true,
			})
			t.Cleanup(func() { _ = rdb.Close() })
			c, err := redislock.New(rdb, opts...)
			if err != nil {
				t.Fatal(err)
			}
			return c
		},
	})
}
