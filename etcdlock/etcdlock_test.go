package etcdlock

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func newClient(t testing.TB, opts ...dlock.Option) *Client {
	t.Helper()
	c, err := New(newEtcd(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestConformance(t *testing.T) {
	dlocktest.Run(t, dlocktest.Backend{
		Info: driver.DriverInfo{Backend: "etcdlock", Kind: driver.KindFair},
		New:  func(t testing.TB, opts ...dlock.Option) dlock.Locker { return newClient(t, opts...) },
		Occupy: func(t testing.TB, key string) func() bool {
			cli := newEtcd(t)
			k := QueuePrefix(key) + "not-a-lock"
			if _, err := cli.Put(context.Background(), k, "user data"); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _, _ = cli.Delete(context.Background(), k) })
			return func() bool {
				resp, err := cli.Get(context.Background(), QueuePrefix(key), clientv3.WithPrefix())
				return err == nil && len(resp.Kvs) == 1 && string(resp.Kvs[0].Key) == k &&
					string(resp.Kvs[0].Value) == "user data" && resp.Kvs[0].Lease == 0
			}
		},
	})
}

// TestObserveWatches: Observe follows an etcd watch, not its one-minute
// polling interval.
func TestObserveWatches(t *testing.T) {
	dlocktest.ObserveWatches(t, newClient(t), newClient(t), 5*time.Second)
}
