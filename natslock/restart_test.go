package natslock

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
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
