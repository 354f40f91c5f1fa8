package zklock

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
)

// TestLockDelayAfterSessionEnd: a holding with a lock-delay whose session
// ends (its ephemeral node vanishes without a release) keeps the lock from the
// next acquisition for the delay; a holding released with Unlock does not.
func TestLockDelayAfterSessionEnd(t *testing.T) {
	const delay = time.Second
	key := dlocktest.Key(t)
	a := newDriver(t)
	ca, err := NewClient(a, dlock.WithLockDelay(delay))
	if err != nil {
		t.Fatal(err)
	}
	held, err := ca.TryLock(ctxT(t, 10*time.Second), key)
	if err != nil {
		t.Fatal(err)
	}
	ended := time.Now()
	if err := a.Close(); err != nil { // the session ends: the node goes with it
		t.Fatal(err)
	}
	cb, err := NewClient(newDriver(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cb.TryLock(ctxT(t, 10*time.Second), key); err == nil {
		t.Fatal("TryLock right after the holder's session ended: granted, within the lock-delay")
	}
	next, err := cb.Lock(ctxT(t, 20*time.Second), key)
	if err != nil {
		t.Fatal(err)
	}
	if got := time.Since(ended); got < delay {
		t.Errorf("granted %v after the holder's session ended, within its %v lock-delay", got, delay)
	}
	if next.Token() <= held.Token() {
		t.Errorf("token %d after the delay, not above %d", next.Token(), held.Token())
	}
	if err := next.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The delay's marker is gone with it: the lock is free at once.
	l, err := cb.TryLock(ctxT(t, 10*time.Second), key)
	if err != nil {
		t.Fatalf("TryLock after the delay and an Unlock: %v", err)
	}
	_ = l.Unlock(context.Background())
}
