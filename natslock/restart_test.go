package natslock

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/natslock/natstest"
	"github.com/nats-io/nats.go"
)

// restartedServer starts a server of the test's own and returns it with two
// Drivers connected to it, on connections that reconnect.
func restartedServer(t *testing.T) (*natstest.Server, *Driver, *Driver) {
	t.Helper()
	s, err := natstest.Start(t.TempDir(), natstest.Options{SyncAlways: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	return s, newDriverURL(t, s.URL), newDriverURL(t, s.URL)
}

// restart restarts s and waits until every Driver's connection is back.
func restart(t *testing.T, s *natstest.Server, ds ...*Driver) {
	t.Helper()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, d := range ds {
		for !jetStreamServes(d) {
			if time.Now().After(deadline) {
				t.Fatal("a Driver's connection not back, or JetStream not serving, 10 s after the restart")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// jetStreamServes reports whether d's connection is up and JetStream answers
// on it.
func jetStreamServes(d *Driver) bool {
	if d.js.Conn().Status() != nats.CONNECTED {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := d.js.AccountInfo(ctx)
	return err == nil
}

// waiting reports whether d has a waiter of key.
func waiting(d *Driver, key string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	kw := d.watches[key]
	return kw != nil && len(kw.waiters) > 0
}

// TestWaiterWokenAfterAServerRestart: a waiter whose key's watch was open
// across a restart of the server is woken by the next release at once (the
// server lost the watch's consumer: the Driver watches again on reconnect),
// not at its next attempt.
func TestWaiterWokenAfterAServerRestart(t *testing.T) {
	s, a, b := restartedServer(t)
	ca, cb := clientOf(t, a), clientOf(t, b)
	key := dlocktest.Key(t)
	ctx := ctxT(t, 30*time.Second)
	l, err := ca.TryLock(ctx, key, dlock.WithTTL(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *dlock.Lease, 1)
	go func() {
		lb, err := cb.Lock(ctx, key, dlock.WithTTL(20*time.Second), dlock.WithWait(25*time.Second))
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		got <- lb
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !waiting(b, key) {
		if time.Now().After(deadline) {
			t.Fatal("the waiter never subscribed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	restart(t, s, a, b)
	// The restarted watch delivers the key as it is: the waiter tries once
	// and waits again. Its next wake-up must be the release.
	for !waiting(b, key) {
		if time.Now().After(deadline) {
			t.Fatal("the waiter not waiting again after the restart")
		}
		time.Sleep(5 * time.Millisecond)
	}
	released := time.Now()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case lb := <-got:
		if lb == nil {
			return
		}
		// Without the wake-up the waiter waits out the holding's 20 s TTL;
		// with it, it may still pay for a request of its own lost in the
		// restart (5 s, the JetStream API timeout).
		if d := time.Since(released); d > 8*time.Second {
			t.Errorf("the waiter took the lock %v after the release", d)
		}
		_ = lb.Unlock(ctx)
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter never took the lock")
	}
}

// TestHolderToldAtOnceAfterAServerRestart: a holding whose key's watch was
// open across a restart of the server is told at once of a force-unlock
// that comes after it, not at its next renewal.
func TestHolderToldAtOnceAfterAServerRestart(t *testing.T) {
	s, a, b := restartedServer(t)
	ca := clientOf(t, a)
	key := dlocktest.Key(t)
	ctx := ctxT(t, 30*time.Second)
	l, err := ca.TryLock(ctx, key, dlock.WithTTL(30*time.Second), dlock.WithAutoRenew(true))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	restart(t, s, a, b)
	// The watch of the holder's key is open again once it delivered the
	// key's message: a force before that is found by its first delivery.
	forced := time.Now()
	if _, err := b.ForceUnlock(ctx, key); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
		if d := time.Since(forced); d > 2*time.Second {
			t.Errorf("told %v after the force", d)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("the holder not told of a force-unlock within 8 s (its renewal comes every 10 s)")
	}
}

// clientOf returns a Client over d.
func clientOf(t *testing.T, d *Driver) *Client {
	t.Helper()
	c, err := NewClient(d)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRevisionsForgottenOnReconnect: the revision a Driver remembers of a
// key's last message, which its next acquisition expects, is dropped when its
// connection reconnects: a restart may have lost writes (the default sync),
// and the same revision may name another message then.
func TestRevisionsForgottenOnReconnect(t *testing.T) {
	s, a, b := restartedServer(t)
	ca := clientOf(t, a)
	key := dlocktest.Key(t)
	ctx := ctxT(t, 30*time.Second)
	l, err := ca.TryLock(ctx, key, dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if a.lastSeen(key) == 0 {
		t.Fatal("the release's revision not remembered")
	}
	// A revision the server will not have after its restart (as after a
	// loss): what the Driver learns once reconnected (its watch's delivery
	// of the key) replaces it, or nothing does.
	const stale = 1 << 40
	a.seen(key, stale)
	restart(t, s, a, b)
	if rev := a.lastSeen(key); rev == stale {
		t.Fatalf("revision %d remembered across a reconnection", rev)
	}
}

// TestStaleHolderLeavesARepeatedRevision: a power loss under the default sync
// takes the store back to before a's grants, and hands their revisions out
// again to b's grants of the same keys; a's release and renewal, which expect
// those revisions, find another owner's messages under them and leave them
// (ErrNotHeld): b keeps both locks. (Before, a's release deleted b's holding
// and a's renewal overwrote the other: two holders, or none, after the
// loss.)
func TestStaleHolderLeavesARepeatedRevision(t *testing.T) {
	s, err := natstest.Start(t.TempDir(), natstest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	a, b := newDriverURL(t, s.URL), newDriverURL(t, s.URL)
	ctx := ctxT(t, 30*time.Second)
	keys := []string{dlocktest.Key(t) + "-release", dlocktest.Key(t) + "-extend"}
	const ttl = 10 * time.Second
	acquire := func(d *Driver, key, owner string) driver.Holding {
		t.Helper()
		g, err := d.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: owner, TTL: ttl})
		if err != nil {
			t.Fatalf("Acquire %s by %s: %v", key, owner, err)
		}
		return driver.Holding{Key: key, Owner: owner, TTL: ttl, Handle: g.Handle}
	}
	// The bucket is on the disk before the snapshot, and so is each key's
	// history up to a release.
	for _, k := range keys {
		if err := b.Release(ctx, acquire(b, k, "b0")); err != nil {
			t.Fatal(err)
		}
	}
	snap := filepath.Join(t.TempDir(), "snapshot")
	if err := s.Snapshot(snap); err != nil {
		t.Fatal(err)
	}
	var ha, hb []driver.Holding
	for _, k := range keys {
		ha = append(ha, acquire(a, k, "a"))
	}
	if err := s.PowerLoss(snap); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, d := range []*Driver{a, b} {
		for !jetStreamServes(d) {
			if time.Now().After(deadline) {
				t.Fatal("a Driver's connection not back, or JetStream not serving, 10 s after the power loss")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	for i, k := range keys {
		hb = append(hb, acquire(b, k, "b"))
		if ra, rb := ha[i].Handle.(*hold).revision(), hb[i].Handle.(*hold).revision(); ra != rb {
			t.Fatalf("%s: b's grant at revision %d, a's lost one at %d: the power loss handed out no revision again", k, rb, ra)
		}
	}
	if err := a.Release(ctx, ha[0]); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("release of a grant the power loss lost, its revision b's now: %v, want ErrNotHeld", err)
	}
	if _, err := a.Extend(ctx, ha[1], ttl); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("renewal of a grant the power loss lost, its revision b's now: %v, want ErrNotHeld", err)
	}
	for i, k := range keys {
		if _, err := b.Extend(ctx, hb[i], ttl); err != nil {
			t.Errorf("%s: b's holding after a's stale call: %v", k, err)
		}
	}
}
