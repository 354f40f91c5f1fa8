package etcdlock

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestSharedLeaseLossLosesEveryLock revokes the lease a Client's locks share
// (from another etcd client) and checks that every Lease on it is lost at once
// when the Driver learns of it (here, from the next acquisition, which gets a
// new lease), that the other Client's lock is untouched, and that Close loses
// the locks on the Driver's leases and revokes them.
func TestSharedLeaseLossLosesEveryLock(t *testing.T) {
	cli := newEtcd(t)
	d, err := NewDriver(cli)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(d)
	if err != nil {
		t.Fatal(err)
	}
	other := newClient(t)
	ctx := ctxT(t, 30*time.Second)
	key := testKey(t)
	a, err := c.Lock(ctx, key+"/a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Lock(ctx, key+"/b")
	if err != nil {
		t.Fatal(err)
	}
	o, err := other.Lock(ctx, key+"/o")
	if err != nil {
		t.Fatal(err)
	}
	info, err := d.Inspect(ctx, key+"/a")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(ctx, EntryKey(key+"/a", info.Owner))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("a's entry: %v, %v", resp, err)
	}
	shared := clientv3.LeaseID(resp.Kvs[0].Lease)
	if _, err := newEtcd(t).Revoke(ctx, shared); err != nil {
		t.Fatal(err)
	}
	c2, err := c.Lock(ctx, key+"/c")
	if err != nil {
		t.Fatalf("a lock after the shared lease was revoked: %v", err)
	}
	for name, l := range map[string]*dlock.Lease{"a": a, "b": b} {
		select {
		case <-l.Done():
		case <-ctx.Done():
			t.Fatalf("%s not lost after its lease was found revoked", name)
		}
		if err := l.Err(); !errors.Is(err, dlock.ErrLockLost) {
			t.Errorf("%s: %v, want ErrLockLost", name, err)
		}
	}
	if err := o.Err(); err != nil {
		t.Errorf("the other Client's lock: %v", err)
	}
	info, err = d.Inspect(ctx, key+"/c")
	if err != nil || !info.Held || info.Token != c2.Token() {
		t.Fatalf("c: %+v, %v", info, err)
	}
	resp, err = cli.Get(ctx, EntryKey(key+"/c", info.Owner))
	if err != nil || len(resp.Kvs) != 1 || clientv3.LeaseID(resp.Kvs[0].Lease) == shared {
		t.Fatalf("c's entry: %v, %v; want it on a new lease", resp, err)
	}
	fresh := clientv3.LeaseID(resp.Kvs[0].Lease)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c2.Done():
	case <-ctx.Done():
		t.Fatal("c not lost when its Driver was closed")
	}
	if ttl, err := cli.TimeToLive(ctx, fresh); err != nil || ttl.TTL != -1 {
		t.Errorf("the lease after Close: %+v, %v; want revoked", ttl, err)
	}
	if info, err := other.Inspect(ctx, key+"/c"); err != nil || info.Held {
		t.Errorf("c after Close: %+v, %v; want free", info, err)
	}
	if err := o.Unlock(ctx); err != nil {
		t.Error(err)
	}
}

// TestHoldingEndsAtItsOwnTTL holds two locks on one Driver's shared lease,
// renews one and never the other (its holder stopped, and its release did not
// happen), and checks that the other's entry is removed once its own TTL has
// passed, before the lease is renewed past it, while the renewed lock stays.
func TestHoldingEndsAtItsOwnTTL(t *testing.T) {
	d := newDriver(t)
	ctx := ctxT(t, 30*time.Second)
	key := testKey(t)
	const ttl = 2 * time.Second
	ka, kb := key+"/a", key+"/b"
	a, b := owner(), owner()
	start := time.Now()
	ga := mustGrant(t, d, driver.AcquireRequest{Key: ka, Owner: a, TTL: ttl})
	gb := mustGrant(t, d, driver.AcquireRequest{Key: kb, Owner: b, TTL: ttl})
	if ga.Handle.(*queueEntry).shared() != gb.Handle.(*queueEntry).shared() {
		t.Fatal("two locks of one TTL on one Driver on different leases")
	}
	deleted := newEtcd(t).Watch(ctx, EntryKey(ka, a), clientv3.WithFilterPut())
	hb := driver.Holding{Key: kb, Owner: b, TTL: ttl, Handle: gb.Handle}
	tick := time.NewTicker(ttl / 4)
	defer tick.Stop()
	for i := 0; ; i++ {
		if i > 40 {
			t.Fatal("a's entry never removed")
		}
		select {
		case wr := <-deleted:
			if wr.Err() != nil {
				t.Fatal(wr.Err())
			}
			gone := time.Since(start)
			if gone < ttl {
				t.Fatalf("a's entry removed %v after it was written, before its TTL of %v", gone, ttl)
			}
			// Renewed at most once per margin (a third of the TTL, whole
			// seconds): the sweep before the first renewal past a's
			// deadline removes it.
			if gone > ttl+2*time.Second {
				t.Errorf("a's entry removed %v after it was written, TTL %v", gone, ttl)
			}
			t.Logf("a's entry removed %v after it was written (TTL %v)", gone.Round(time.Millisecond), ttl)
			if _, err := d.Extend(ctx, hb, ttl); err != nil {
				t.Fatalf("b after a's removal: %v", err)
			}
			if _, err := d.Extend(ctx, driver.Holding{Key: ka, Owner: a, TTL: ttl, Handle: ga.Handle}, ttl); !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("Extend of a after its removal: %v, want ErrNotHeld", err)
			}
			return
		case <-tick.C:
			if _, err := d.Extend(ctx, hb, ttl); err != nil {
				t.Fatal(err)
			}
		}
	}
}
