package legacy_test

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/legacy"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// TestCluster runs the legacy locker and the Bridge through a
// *redis.ClusterClient on a three-master cluster: each script stays in one slot
// (the legacy key and its companion), and the Bridge's two keys, in different
// slots, are taken one after the other. (The conformance suite runs on a single
// server: its 60ms leases do not allow for a new ClusterClient's first commands
// on a loaded machine.)
func TestCluster(t *testing.T) {
	cluster := testserver.StartCluster(t, 3)
	newCC := func(t testing.TB) *redis.ClusterClient {
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = rdb.Close() })
		return rdb
	}
	ctx := ctxT(t, 10*time.Second)
	rdb := newCC(t)
	for _, k := range []string{"lock.foo", "foo_lock", "lock_goods:{300}"} {
		c, err := legacy.CompanionKey(k)
		if err != nil {
			t.Fatal(err)
		}
		a, b := rdb.ClusterKeySlot(ctx, k).Val(), rdb.ClusterKeySlot(ctx, c).Val()
		if a != b {
			t.Errorf("slot of %q is %d, of its companion %q %d", k, a, c, b)
		}
	}
	f := legacy.Format{Key: legacy.Prefix("lock."), Expire: true}
	for name, mk := range map[string]func(t testing.TB, opts ...dlock.Option) dlock.Locker{
		"legacy": func(t testing.TB, opts ...dlock.Option) dlock.Locker {
			c, err := legacy.New(newCC(t), f, opts...)
			if err != nil {
				t.Fatal(err)
			}
			return c
		},
		"bridge": func(t testing.TB, opts ...dlock.Option) dlock.Locker {
			c, err := legacy.NewBridge(newCC(t), f, opts...)
			if err != nil {
				t.Fatal(err)
			}
			return c
		},
	} {
		t.Run(name, func(t *testing.T) {
			key := dlocktest.Key(t)
			l := mk(t, dlock.WithTTL(10*time.Second))
			lease, err := l.TryLock(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := mk(t).TryLock(ctx, key); err == nil {
				t.Fatal("second TryLock succeeded")
			}
			old := &springLock{key: "lock." + key, expire: time.Second, now: time.Now}
			if n := rdb.Exists(ctx, old.key).Val(); n != 1 {
				t.Fatalf("legacy key missing")
			}
			if err := lease.Extend(ctx, 20*time.Second); err != nil {
				t.Fatal(err)
			}
			if ttl, err := lease.TTL(ctx); err != nil || ttl < 15*time.Second {
				t.Fatalf("TTL %v %v", ttl, err)
			}
			if err := lease.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if n := rdb.Exists(ctx, old.key, redislock.LockKey(key)).Val(); n != 0 {
				t.Fatalf("%d keys left after Unlock", n)
			}
		})
	}
}
