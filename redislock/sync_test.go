package redislock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/redislock"
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
