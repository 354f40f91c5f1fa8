package zklock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/dlocktest"

	"github.com/dlock-go/dlock"
)

// TestForceUnlockTellsEveryHoldingAtOnce: a holding force-unlocked from
// another Client is told within told, well before the next holder could take
// the lock past a lock-delay of a second, whatever the way it was taken: with
// or without a lock-delay (whose marker the grant writes after its last read
// of the queue), by TryLock or Lock, after waiting, after another holding's
// delay ran out (whose marker the grant deletes), and after a renewal of a
// holding whose node is watched because a waiter queued behind it.
func TestForceUnlockTellsEveryHoldingAtOnce(t *testing.T) {
	const (
		delay = time.Second
		ttl   = 15 * time.Second
		told  = delay / 2
	)
	type setup func(t *testing.T, key string, holder *dlock.Client) *dlock.Lease
	tryLock := func(t *testing.T, key string, holder *dlock.Client) *dlock.Lease {
		l, err := holder.TryLock(ctxT(t, 10*time.Second), key)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	lock := func(t *testing.T, key string, holder *dlock.Client) *dlock.Lease {
		l, err := holder.Lock(ctxT(t, 10*time.Second), key)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	// waited takes the lock with Lock behind another Client's holding (with
	// a lock-delay too), released.
	waited := func(t *testing.T, key string, holder *dlock.Client) *dlock.Lease {
		other, err := NewClient(newDriver(t), dlock.WithLockDelay(delay))
		if err != nil {
			t.Fatal(err)
		}
		first, err := other.TryLock(ctxT(t, 10*time.Second), key)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan *dlock.Lease, 1)
		go func() {
			l, err := holder.Lock(ctxT(t, 10*time.Second), key)
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
		obs := newDriver(t)
		waitQueue(t, obs, obs.lockPath(key), 10*time.Second, func(q []child) bool { return len(q) == 2 })
		if err := first.Unlock(ctxT(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
		l := <-got
		if l == nil {
			t.FailNow()
		}
		return l
	}
	// afterDelay takes the lock with Lock once the delay of another holding,
	// whose session ended, has run out.
	afterDelay := func(t *testing.T, key string, holder *dlock.Client) *dlock.Lease {
		od := newDriver(t)
		other, err := NewClient(od, dlock.WithLockDelay(delay))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := other.TryLock(ctxT(t, 10*time.Second), key); err != nil {
			t.Fatal(err)
		}
		if err := od.Close(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		l := lock(t, key, holder)
		if time.Since(start) < delay {
			t.Fatalf("granted %v after the session ended, within the delay", time.Since(start))
		}
		return l
	}
	// renewed takes the lock with TryLock, waits until its node is watched
	// because a waiter queued behind it (that waiter then takes the lock
	// after the force), and renews it.
	renewed := func(t *testing.T, key string, holder *dlock.Client) *dlock.Lease {
		l := tryLock(t, key, holder)
		waiter, err := NewClient(newDriver(t))
		if err != nil {
			t.Fatal(err)
		}
		wctx := ctxT(t, 20*time.Second) // cancelled after the wait below
		done := make(chan struct{})
		go func() {
			defer close(done)
			next, err := waiter.Lock(wctx, key)
			if err != nil {
				t.Error(err)
				return
			}
			_ = next.Unlock(context.Background())
		}()
		t.Cleanup(func() { <-done })
		d := holder.Driver().(*Driver)
		lp := d.lockPath(key)
		for end := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			d.holds.mu.Lock()
			h := d.holds.byLock[lp]
			armed := h != nil && h.armed
			d.holds.mu.Unlock()
			if armed {
				break
			}
			if time.Now().After(end) {
				t.Fatal("the holder's node is not watched 10 s after a waiter queued")
			}
		}
		if err := l.Extend(ctxT(t, 10*time.Second), ttl); err != nil {
			t.Fatal(err)
		}
		return l
	}
	for _, tc := range []struct {
		name  string
		delay time.Duration
		take  setup
	}{
		{"TryLock", 0, tryLock},
		{"Lock", 0, lock},
		{"TryLock/delay", delay, tryLock},
		{"Lock/delay", delay, lock},
		{"waited/delay", delay, waited},
		{"after_a_delay", 0, afterDelay},
		{"renewed", 0, renewed},
		{"renewed/delay", delay, renewed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := dlocktest.Key(t)
			opts := []dlock.Option{dlock.WithTTL(ttl)}
			if tc.delay > 0 {
				opts = append(opts, dlock.WithLockDelay(tc.delay))
			}
			holder, err := NewClient(newDriver(t), opts...)
			if err != nil {
				t.Fatal(err)
			}
			forceAndAwait(t, tc.take(t, key, holder), told)
		})
	}
}

// forceAndAwait force-unlocks l's lock from a Client of another session, and
// wants l's Done closed within told, with ErrLockLost.
func forceAndAwait(t *testing.T, l *dlock.Lease, told time.Duration) {
	t.Helper()
	forcer, err := NewClient(newDriver(t))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := forcer.ForceUnlock(ctxT(t, 10*time.Second), l.Key()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(told):
		t.Fatalf("the holder was not told within %v of the force-unlock", told)
	}
	took := time.Since(start)
	if err := l.Err(); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("Err after the force-unlock: %v, want ErrLockLost", err)
	}
	t.Logf("force-unlock to Done: %v", took)
}

// TestForceAfterAQueueChangeBeforeRegistrationIsTold: another client queues
// behind a grant between its last read of the queue and the registration of
// its holding, so that the child watch of that read fires before there is a
// holding to arm; a force-unlock later is told at once all the same.
func TestForceAfterAQueueChangeBeforeRegistrationIsTold(t *testing.T) {
	key := dlocktest.Key(t)
	d := newDriver(t)
	other := newDriver(t)
	d.testHookGrant = func(lp string) {
		d.testHookGrant = nil
		if _, err := other.acquire(ctxT(t, 10*time.Second), key, "waiter", testSession, "", true); !errors.Is(err, dlock.ErrNotObtained) {
			t.Errorf("queueing behind the grant: %v", err)
		}
		// The server sends the watch's event before the reply to this
		// session's next request: the event has been handled once it returns.
		if _, _, err := d.conn.Exists(lp); err != nil {
			t.Error(err)
		}
	}
	holder, err := NewClient(d, dlock.WithTTL(15*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	l, err := holder.TryLock(ctxT(t, 10*time.Second), key)
	if err != nil {
		t.Fatal(err)
	}
	forceAndAwait(t, l, 500*time.Millisecond)
}
