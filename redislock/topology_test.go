package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

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
		Info: driver.DriverInfo{Backend: "redislock", Kind: driver.KindMutex},
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
		Info: driver.DriverInfo{Backend: "redislock", Kind: driver.KindMutex},
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

// TestClusterPrimitives runs the reentrant lock, optimistic writes, a
// multi-key lock over keys in different slots and an election through a
// *redis.ClusterClient: every script touches one hash slot only.
func TestClusterPrimitives(t *testing.T) {
	cluster := testserver.StartCluster(t, 3)
	ctx := context.Background()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	key := dlocktest.Key(t)

	re, err := redislock.NewReentrant(rdb, dlock.WithOwner("svc"))
	if err != nil {
		t.Fatal(err)
	}
	outer, err := re.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := re.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(inner.Unlock(ctx), outer.Unlock(ctx)); err != nil {
		t.Fatal(err)
	}

	opt, err := redislock.NewOptimistic(rdb, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := opt.Update(ctx, key, incr, nil); err != nil || v.Value != "1" || v.Version == 0 {
		t.Fatalf("Update: %+v %v", v, err)
	}

	plain, err := redislock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	grp, err := dlock.LockAll(ctx, plain, []string{key + ".a", key + ".b", key + ".c", key + ".d"})
	if err != nil {
		t.Fatal(err)
	}
	if err := grp.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lead, err := dlock.Campaign(ctx, plain, key+".role", dlock.WithMetadata("node-1"))
	if err != nil {
		t.Fatal(err)
	}
	if info, err := dlock.CurrentLeader(ctx, plain, key+".role"); err != nil || info.Metadata != "node-1" {
		t.Fatalf("Leader: %+v %v", info, err)
	}
	if err := lead.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}
