package dlocktest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
)

// delaySlack is how much earlier than its lock-delay the suite lets a lock be
// taken again: the stores count in whole milliseconds, and a lease's end on
// the server comes after the start of the request that took it.
const delaySlack = 30 * time.Millisecond

// testDelay is the suite's lock-delay test: a backend that cannot keep a
// lock-delay refuses it with errors.ErrUnsupported; one that can keeps the
// lock from everybody for the delay after a holding that ended without an
// Unlock, and not after an Unlock.
func testDelay(t *testing.T, b Backend) {
	l := b.New(t)
	ctx := ctxT(t, 30*time.Second)
	key := Key(t)
	c, ok := l.(interface{ Driver() driver.Driver })
	if !ok {
		t.Skip("the Locker does not name its driver")
	}
	if _, ok := c.Driver().(driver.LockDelayer); !ok {
		for name, f := range map[string]func(context.Context, string, ...dlock.Option) (*dlock.Lease, error){"TryLock": l.TryLock, "Lock": l.Lock} {
			if lease, err := f(ctx, key, dlock.WithLockDelay(time.Second)); !errors.Is(err, errors.ErrUnsupported) || lease != nil {
				t.Errorf("%s with a lock-delay on a backend without them: %v, %v; want errors.ErrUnsupported", name, lease, err)
			}
		}
		lease := mustLock(t, l, key, dlock.WithLockDelay(0))
		unlock(t, lease)
		return
	}
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, Backend)
	}{
		{"BadDelay", testDelayBad},
		{"UnlockSkipsDelay", testDelayUnlock},
		{"ExpiryStartsDelay", testDelayExpiry},
		{"ForceUnlockStartsDelay", testDelayForced},
		{"CancelDuringDelayLeavesNothing", testDelayCancel},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, b) })
	}
}

// lockDelay is the delay the suite's tests give their locks.
const lockDelay = time.Second

func testDelayBad(t *testing.T, b Backend) {
	l := b.New(t)
	ctx := ctxT(t, 10*time.Second)
	key := Key(t)
	for name, d := range map[string]time.Duration{"negative": -time.Millisecond, "above the maximum": driver.MaxLockDelay + time.Millisecond} {
		for fname, f := range map[string]func(context.Context, string, ...dlock.Option) (*dlock.Lease, error){"TryLock": l.TryLock, "Lock": l.Lock} {
			if lease, err := f(ctx, key, dlock.WithLockDelay(d)); !errors.Is(err, dlock.ErrInvalid) || lease != nil {
				t.Errorf("%s with a %s lock-delay: %v, %v; want ErrInvalid", fname, name, lease, err)
			}
		}
	}
	// Nothing was taken, and nothing is in a delay.
	unlock(t, mustLock(t, l, key))
}

func testDelayUnlock(t *testing.T, b Backend) {
	key := Key(t)
	lease := mustLock(t, b.New(t), key, dlock.WithLockDelay(lockDelay))
	unlock(t, lease)
	next := mustLock(t, b.New(t), key) // TryLock: at once
	if next.Token() <= lease.Token() {
		t.Errorf("token %d after an Unlock, not above %d", next.Token(), lease.Token())
	}
	unlock(t, next)
}

// inDelay checks that key, in its lock-delay, is refused to a TryLock and
// shown by an Inspector as in its delay for at most d.
func inDelay(t *testing.T, b Backend, key string, end time.Time, d time.Duration) {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	l := b.New(t)
	insp, _ := l.(driver.Inspector)
	var info dlock.LockInfo
	var err error
	if insp != nil {
		// The holder is told of its loss a little before the store's lease
		// ends (the drift margin): wait for the store's end (a store that
		// removes a dead holding at the next acquisition shows it past its
		// TTL until then).
		for range 500 {
			if info, err = insp.Inspect(ctx, key); err != nil || !info.Held || info.TTL < 0 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	var busy *dlock.BusyError
	tried := time.Now()
	if lease, err := l.TryLock(ctx, key); !errors.As(err, &busy) || lease != nil {
		if lease != nil && tried.Sub(end) > d-delaySlack {
			// A loaded machine came to the attempt after the delay: what it
			// shows is not the delay's.
			_ = lease.Unlock(ctx)
			t.Skipf("the attempt came %v after the holding's end, past its %v lock-delay", tried.Sub(end), d)
		}
		t.Fatalf("TryLock in the lock-delay: %v, %v; want a *BusyError", lease, err)
	}
	if busy.Remaining > d+time.Second {
		t.Errorf("TryLock in the lock-delay: %v left, of a %v delay", busy.Remaining, d)
	}
	if insp == nil || errors.Is(err, errors.ErrUnsupported) {
		return
	}
	if info, err = insp.Inspect(ctx, key); err == nil && info.Held && info.TTL < 0 {
		return // a dead holding the store ends at a later acquisition (zklock)
	}
	if err != nil || info.Held || info.DelayLeft <= 0 || info.DelayLeft > d+time.Second {
		t.Errorf("Inspect in the lock-delay: %+v, %v; want not held, in a delay of at most %v", info, err, d)
	}
	if infos, err := driver.List(ctx, insp, key); err != nil || len(infos) != 1 || infos[0].DelayLeft <= 0 {
		t.Errorf("List in the lock-delay: %+v, %v; want the key in its delay", infos, err)
	}
}

// after takes key with Lock and checks that it came no earlier than d after
// from, nor much later.
func after(t *testing.T, b Backend, key string, from time.Time, d time.Duration) *dlock.Lease {
	t.Helper()
	lease, err := b.New(t).Lock(ctxT(t, 30*time.Second), key, dlock.WithWait(d+20*time.Second))
	got := time.Since(from)
	if err != nil {
		t.Fatalf("Lock through the lock-delay: %v", err)
	}
	if got < d-delaySlack {
		t.Errorf("taken %v after the holding's end, within its %v lock-delay", got, d)
	}
	if got > d+10*time.Second {
		t.Errorf("taken %v after the holding's end, long after its %v lock-delay", got, d)
	}
	return lease
}

func testDelayExpiry(t *testing.T, b Backend) {
	key := Key(t)
	l := b.New(t)
	ttl := scaled(l, 200*time.Millisecond)
	start := time.Now()
	held := mustLock(t, l, key, dlock.WithTTL(ttl), dlock.WithLockDelay(lockDelay))
	locked := time.Now() // the store's holding ends before locked + ttl
	// The holder crashed: it renews nothing and never unlocks.
	select {
	case <-held.Done():
	case <-time.After(ttl + 10*time.Second):
		t.Fatal("Done not closed after the lease's TTL")
	}
	inDelay(t, b, key, locked.Add(ttl), lockDelay)
	next := after(t, b, key, start.Add(ttl), lockDelay)
	if next.Token() <= held.Token() {
		t.Errorf("token %d after the lock-delay, not above %d", next.Token(), held.Token())
	}
	if err := held.Unlock(ctxT(t, 10*time.Second)); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Unlock by the holder that ran out: %v, want ErrNotHeld", err)
	}
	unlock(t, next)
}

func testDelayForced(t *testing.T, b Backend) {
	l := b.New(t)
	insp, ok := l.(driver.Inspector)
	if !ok {
		t.Skip("the Locker is not a driver.Inspector")
	}
	key := Key(t)
	ctx := ctxT(t, 10*time.Second)
	held := mustLock(t, l, key, dlock.WithTTL(scaled(l, 10*time.Second)), dlock.WithLockDelay(lockDelay))
	start := time.Now()
	if _, err := insp.ForceUnlock(ctx, key); errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("the backend cannot force its locks: %v", err)
	} else if err != nil {
		t.Fatalf("ForceUnlock: %v", err)
	}
	inDelay(t, b, key, time.Now(), lockDelay)
	if err := held.Extend(ctx, scaled(l, 10*time.Second)); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Extend after ForceUnlock: %v, want ErrNotHeld", err)
	}
	next := after(t, b, key, start, lockDelay)
	if next.Token() <= held.Token() {
		t.Errorf("token %d after the lock-delay, not above %d", next.Token(), held.Token())
	}
	unlock(t, next)
}

func testDelayCancel(t *testing.T, b Backend) {
	key := Key(t)
	l := b.New(t)
	ttl := scaled(l, 200*time.Millisecond)
	start := time.Now()
	held := mustLock(t, l, key, dlock.WithTTL(ttl), dlock.WithLockDelay(lockDelay))
	<-held.Done()
	// A waiter gives up within the delay; another is cancelled mid-wait.
	waiter := b.New(t)
	if lease, err := waiter.Lock(ctxT(t, 10*time.Second), key, dlock.WithWait(lockDelay/4)); !errors.Is(err, dlock.ErrNotObtained) || lease != nil {
		t.Fatalf("Lock with a wait shorter than the lock-delay: %v, %v; want ErrNotObtained", lease, err)
	}
	cctx, cancel := context.WithCancel(context.Background())
	defer time.AfterFunc(lockDelay/4, cancel).Stop()
	done := make(chan error, 1)
	go func() {
		lease, err := waiter.Lock(cctx, key, dlock.WithLockDelay(lockDelay))
		if lease != nil {
			_ = lease.Unlock(context.Background())
		}
		done <- err
	}()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Lock in the lock-delay: %v, want context.Canceled", err)
	}
	// The waiters left nothing: the lock is free once the delay is over, for
	// a third client, and takes no delay of theirs.
	next := after(t, b, key, start.Add(ttl), lockDelay)
	unlock(t, next)
	unlock(t, mustLock(t, b.New(t), key))
}
