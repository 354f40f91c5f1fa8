package etcdlock

import (
	"context"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestSyncConformance(t *testing.T) {
	dlocktest.RunSync(t, dlocktest.SyncBackend{
		New: func(t testing.TB) dlock.SyncDriver { return newDriver(t) },
		TTL: 1e9, // etcd's leases count whole seconds
		Occupy: func(t testing.TB, name string) func() bool {
			cli := newEtcd(t)
			ctx := context.Background()
			keys := []string{SyncPrefix(name) + "latch", SyncPrefix(name) + "barrier"}
			for _, k := range keys {
				if _, err := cli.Put(ctx, k, "user data"); err != nil {
					t.Fatal(err)
				}
			}
			t.Cleanup(func() { _, _ = cli.Delete(ctx, SyncPrefix(name), clientv3.WithPrefix()) })
			return func() bool {
				resp, err := cli.Get(ctx, SyncPrefix(name), clientv3.WithPrefix())
				if err != nil || len(resp.Kvs) != 2 {
					return false
				}
				for _, kv := range resp.Kvs {
					if string(kv.Value) != "user data" || kv.Lease != 0 {
						return false
					}
				}
				return true
			}
		},
	})
}
