package etcdlock

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testserver"
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
		Skip: map[string]string{
			"Once/the result lives its TTL": "a result's lease counts whole seconds, at least the server's minimum (TestResultEndsWithItsLease)",
		},
	})
}

// TestObserveWatches: Observe follows an etcd watch, not its one-minute
// polling interval.
func TestObserveWatches(t *testing.T) {
	dlocktest.ObserveWatches(t, newClient(t), newClient(t), 5*time.Second)
}

// watchedClient returns a Client and its Driver, and a function that waits
// until the Driver's loss watch is created.
func watchedClient(t *testing.T) (*Client, func()) {
	d, err := NewDriver(newEtcd(t))
	if err != nil {
		t.Fatal(err)
	}
	c, err := dlock.NewClient(d)
	if err != nil {
		t.Fatal(err)
	}
	return c, func() {
		d.lw.mu.Lock()
		ready := d.lw.ready
		d.lw.mu.Unlock()
		select {
		case <-ready:
		case <-time.After(10 * time.Second):
			t.Fatal("no loss watch within 10 s")
		}
	}
}

func TestForceUnlockTellsHolderAtOnce(t *testing.T) {
	c, watched := watchedClient(t)
	took := dlocktest.PushedLoss(t, c, dlocktest.Key(t), 2*time.Second, func(ctx context.Context, l *dlock.Lease) (time.Time, error) {
		watched()
		start := time.Now()
		_, err := c.ForceUnlock(ctx, l.Key())
		return start, err
	})
	t.Logf("ForceUnlock to Done: %v", took)
}

// TestDeletionBeforeTheWatchTellsHolderAtOnce: an entry deleted after its
// holding began but before the Driver's loss watch was created is found when
// the watch begins, not at the next renewal.
func TestDeletionBeforeTheWatchTellsHolderAtOnce(t *testing.T) {
	d, err := NewDriver(newEtcd(t))
	if err != nil {
		t.Fatal(err)
	}
	proceed := make(chan struct{})
	d.lw.start = func() { <-proceed }
	c, err := dlock.NewClient(d)
	if err != nil {
		t.Fatal(err)
	}
	raw := newEtcd(t)
	took := dlocktest.PushedLoss(t, c, dlocktest.Key(t), 2*time.Second, func(ctx context.Context, l *dlock.Lease) (time.Time, error) {
		start := time.Now()
		_, err := raw.Delete(ctx, EntryKey(l.Key(), l.Owner()))
		close(proceed)
		return start, err
	})
	t.Logf("a delete before the watch to Done: %v", took)
}

func TestDeletionByAnotherClientTellsHolderAtOnce(t *testing.T) {
	c, watched := watchedClient(t)
	raw := newEtcd(t)
	took := dlocktest.PushedLoss(t, c, dlocktest.Key(t), 2*time.Second, func(ctx context.Context, l *dlock.Lease) (time.Time, error) {
		watched()
		start := time.Now()
		_, err := raw.Delete(ctx, EntryKey(l.Key(), l.Owner()))
		return start, err
	})
	t.Logf("a raw delete to Done: %v", took)
}

// TestResultEndsWithItsLease: dlock.Once's result on etcd lives on a lease of
// its own: a second's ResultTTL ends within the server's minimum lease TTL
// (two seconds here) and a little more, and the next caller computes again.
func TestResultEndsWithItsLease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	o := dlock.Once{Client: newClient(t), ResultTTL: time.Second}
	key := dlocktest.Key(t)
	var runs atomic.Int32
	fn := func(context.Context) ([]byte, error) { return fmt.Appendf(nil, "%d", runs.Add(1)), nil }
	if v, err := o.Do(ctx, key, fn); err != nil || string(v) != "1" {
		t.Fatalf("first Do: %q, %v", v, err)
	}
	if v, err := o.Do(ctx, key, fn); err != nil || string(v) != "1" {
		t.Fatalf("Do within the result's TTL: %q, %v; want the result kept", v, err)
	}
	cli := newEtcd(t)
	testserver.Eventually(t, 5*time.Second, "the result gone with its lease", func() bool {
		resp, err := cli.Get(ctx, ResultKey(key))
		return err == nil && len(resp.Kvs) == 0
	})
	if v, err := o.Do(ctx, key, fn); err != nil || string(v) != "2" {
		t.Fatalf("Do after the result's lease: %q, %v; want a new computation", v, err)
	}
}
