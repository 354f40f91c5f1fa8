package pglock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
)

func newFair(t testing.TB, opts ...dlock.Option) (*Client, *FairDriver) {
	t.Helper()
	f, err := NewFairDriver(newPool(t))
	if err != nil {
		t.Fatal(err)
	}
	c, err := dlock.NewClient(f, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c, f
}

func TestFairConformance(t *testing.T) {
	dlocktest.Run(t, dlocktest.Backend{
		Info: driver.DriverInfo{Backend: "pglock", Kind: driver.KindFair},
		New: func(t testing.TB, opts ...dlock.Option) dlock.Locker {
			c, _ := newFair(t, opts...)
			return c
		},
		Skip: map[string]string{
			"ForeignDataIsConflict": "a table row is always a lock; a table of another shape is ErrConflict (TestForeignTableIsConflict)",
		},
	})
}

// queued waits until key has n waiters in its queue.
func queued(t *testing.T, f *FairDriver, key string, n int) {
	t.Helper()
	for i := 0; i < 1000; i++ {
		info, err := f.Inspect(ctxT(t, 5*time.Second), key)
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

// Waiters of several processes get the lock in the order they queued, and a
// TryLock does not overtake them.
func TestFairGrantsInArrivalOrder(t *testing.T) {
	key := dlocktest.Key(t)
	ctx := ctxT(t, 60*time.Second)
	holder, f := newFair(t)
	l, err := holder.TryLock(ctx, key, dlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	// The waiters keep the lock until the TryLock below has run: waiters that
	// went through at once would leave it free for that TryLock.
	hold := make(chan struct{})
	for i := 0; i < n; i++ {
		w, _ := newFair(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			lease, err := w.Lock(ctx, key, dlock.WithWait(30*time.Second))
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			<-hold
			_ = lease.Unlock(ctx)
		}()
		queued(t, f, key, i+1)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	other, _ := newFair(t)
	if _, err := other.TryLock(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
		t.Errorf("TryLock while waiters queue: %v, want ErrNotObtained", err)
	}
	close(hold)
	wg.Wait()
	for i, got := range order {
		if got != i {
			t.Fatalf("grant order %v, want arrival order", order)
		}
	}
	if len(order) != n {
		t.Fatalf("%d of %d waiters got the lock", len(order), n)
	}
	if info, err := f.Inspect(ctx, key); err != nil || info.Waiters != 0 || info.Held {
		t.Fatalf("after the waiters: %+v, %v", info, err)
	}
}

// A waiter that gives up leaves the queue at once; one that dies (stops
// attempting) is dropped after FairWaiterTTL.
func TestFairWaitersThatLeaveOrDie(t *testing.T) {
	key := dlocktest.Key(t)
	ctx := ctxT(t, 60*time.Second)
	holder, f := newFair(t)
	l, err := holder.TryLock(ctx, key, dlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	w, _ := newFair(t)
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = w.Lock(cctx, key)
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
	queued(t, f, key, 1)
	if info, err := f.Inspect(ctx, key); err != nil || info.Kind != driver.KindFair || info.Owner != l.Owner() || info.Waiters != 1 {
		t.Fatalf("Inspect of a fair lock with a waiter: %+v, %v", info, err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	next, err := w.Lock(ctx, key, dlock.WithWait(FairWaiterTTL+10*time.Second))
	if err != nil {
		t.Fatalf("waiter behind a dead one: %v", err)
	}
	el := time.Since(start)
	t.Logf("waiter behind a dead one got the lock after %v (FairWaiterTTL %v)", el, FairWaiterTTL)
	if el > FairWaiterTTL+3*time.Second {
		t.Errorf("waiter behind a dead one waited %v", el)
	}
	_ = next.Unlock(ctx)
}
