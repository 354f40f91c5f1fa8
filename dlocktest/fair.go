package dlocktest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// FairDriver is the driver of a backend's fair lock that RunFair needs: it
// counts the waiters of a key's queue in its LockInfo.
type FairDriver interface {
	driver.Driver
	driver.Inspector
}

// FairBackend describes a backend's fair lock for RunFair.
type FairBackend struct {
	// New returns a Locker of fair locks with connections of its own
	// (closed by t.Cleanup), with opts as its defaults, and its driver.
	New func(t testing.TB, opts ...dlock.Option) (dlock.Locker, FairDriver)

	// WaiterTTL is how long the queue entry of a waiter that stopped
	// attempting stays in the way of those behind it.
	WaiterTTL time.Duration

	// HandOver, when positive, bounds the time from a release to the grant
	// of the next waiter in the queue, of another Locker: a waiter woken by
	// the release rather than by its own schedule.
	HandOver time.Duration
}

// RunFair runs the checks of a fair lock as subtests of t: waiters of
// several Lockers get the lock in the order they queued, a TryLock does not
// pass them, a waiter that gives up leaves the queue at once, and one that
// dies is passed over after WaiterTTL.
func RunFair(t *testing.T, b FairBackend) {
	if b.New == nil || b.WaiterTTL <= 0 {
		t.Fatal("dlocktest: FairBackend needs New and WaiterTTL")
	}
	t.Run("GrantsInArrivalOrder", func(t *testing.T) { testFairOrder(t, b) })
	t.Run("WaitersThatLeaveOrDie", func(t *testing.T) { testFairLeaveOrDie(t, b) })
}

// Queued waits until key has n waiters in the queue that in shows, and
// fails t when they do not come.
func Queued(t testing.TB, in driver.Inspector, key string, n int) {
	t.Helper()
	for range 1000 {
		info, err := in.Inspect(ctxT(t, 5*time.Second), key)
		if err != nil {
			t.Fatal(err)
		}
		if info.Waiters == n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%d waiters never queued", n)
}

// fairHeld takes a key with a Locker of b's for 30 s, and returns the key, a
// context for the test, the Locker's driver and the lease.
func fairHeld(t *testing.T, b FairBackend) (string, context.Context, FairDriver, *dlock.Lease) {
	t.Helper()
	key := Key(t)
	ctx := ctxT(t, 60*time.Second)
	holder, in := b.New(t)
	l, err := holder.TryLock(ctx, key, dlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return key, ctx, in, l
}

func testFairOrder(t *testing.T, b FairBackend) {
	key, ctx, in, l := fairHeld(t, b)
	const n = 4
	var mu sync.Mutex
	var order []int
	var slowest time.Duration
	var wg sync.WaitGroup
	// The first waiter keeps the lock until the TryLock below has run:
	// waiters that went through at once would leave it free for that
	// TryLock.
	hold := make(chan struct{})
	released := make(chan time.Time, n)
	for i := range n {
		w, _ := b.New(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			lease, err := w.Lock(ctx, key, dlock.WithWait(30*time.Second), dlock.WithTTL(30*time.Second))
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			if i > 0 {
				slowest = max(slowest, time.Since(<-released))
			}
			mu.Unlock()
			if i == 0 {
				<-hold
			}
			released <- time.Now()
			_ = lease.Unlock(ctx)
		}()
		Queued(t, in, key, i+1)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	other, _ := b.New(t)
	if _, err := other.TryLock(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
		t.Errorf("TryLock while waiters queue: %v, want ErrNotObtained", err)
	}
	close(hold)
	wg.Wait()
	if len(order) != n {
		t.Fatalf("%d of %d waiters got the lock", len(order), n)
	}
	for i, got := range order {
		if got != i {
			t.Fatalf("grant order %v, want arrival order", order)
		}
	}
	t.Logf("slowest hand-over from a release to the next waiter: %v", slowest)
	if b.HandOver > 0 && slowest >= b.HandOver {
		t.Errorf("a hand-over took %v, more than %v: the waiter was not woken", slowest, b.HandOver)
	}
	if info, err := in.Inspect(ctx, key); err != nil || info.Waiters != 0 || info.Held {
		t.Fatalf("after the waiters: %+v, %v", info, err)
	}
}

func testFairLeaveOrDie(t *testing.T, b FairBackend) {
	key, ctx, f, l := fairHeld(t, b)
	w, _ := b.New(t)
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := w.Lock(cctx, key)
	cancel()
	if !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("Lock with a short context: %v", err)
	}
	if info, err := f.Inspect(ctx, key); err != nil || info.Waiters != 0 {
		t.Fatalf("queue after a waiter gave up: %+v, %v", info, err)
	}
	// A dead waiter: queued by one attempt, never seen again.
	if _, err := f.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: "dead", TTL: time.Minute, Waiting: true}); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatal(err)
	}
	Queued(t, f, key, 1)
	if info, err := f.Inspect(ctx, key); err != nil || info.Kind != driver.KindFair || info.Owner != l.Owner() || info.Waiters != 1 {
		t.Fatalf("Inspect of a fair lock with a waiter: %+v, %v", info, err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	next, err := w.Lock(ctx, key, dlock.WithWait(b.WaiterTTL+10*time.Second))
	if err != nil {
		t.Fatalf("waiter behind a dead one: %v", err)
	}
	el := time.Since(start)
	t.Logf("waiter behind a dead one got the lock after %v (WaiterTTL %v)", el, b.WaiterTTL)
	if el > b.WaiterTTL+3*time.Second {
		t.Errorf("waiter behind a dead one waited %v", el)
	}
	_ = next.Unlock(ctx)
}
