package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testserver"
	"golang.org/x/sync/errgroup"
)

// lockWait takes r.Key the way a waiting Lock does: it queues, sleeps until its
// subscription wakes it or RetryAfter passes, and retries through
// ErrUnavailable, until ctx ends. queued is called once, after the first
// attempt that left the waiter in the queue.
func lockWait(ctx context.Context, d *Driver, r AcquireRequest, queued func()) (Grant, error) {
	r.Waiting = true
	var wake <-chan struct{}
	for {
		g, err := d.Acquire(ctx, r)
		var busy *BusyError
		delay := 50 * time.Millisecond
		switch {
		case err == nil:
			return g, nil
		case errors.As(err, &busy):
			if r.Handle == nil {
				queued()
			}
			r.Handle = busy.Handle
			if wake == nil {
				w, cancel, err := d.Subscribe(ctx, Holding{Key: r.Key, Owner: r.Owner, Handle: r.Handle})
				if err != nil {
					return Grant{}, err
				}
				defer cancel()
				wake = w
			}
			delay = busy.RetryAfter
		case !errors.Is(err, dlock.ErrUnavailable):
			return Grant{}, err
		}
		select {
		case <-ctx.Done():
			return Grant{}, ctx.Err()
		case <-wake:
		case <-time.After(delay):
		}
	}
}

// retryUnavailable runs f until it returns something other than ErrUnavailable
// or ctx ends.
func retryUnavailable(ctx context.Context, f func() error) error {
	for {
		err := f()
		if !errors.Is(err, dlock.ErrUnavailable) {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestLeaderKilledWhileHeldAndWaited runs a holder and queued waiters, each with
// its own client to all members of a 3-member cluster, kills the leader while
// the lock is held and the waiters wait, brings it back, and kills the next
// leader while a waiter holds. Nobody may ever hold the lock together with
// another, every waiter must get it in queue order, and tokens must increase.
func TestLeaderKilledWhileHeldAndWaited(t *testing.T) {
	const waiters = 3
	c := testserver.StartEtcdCluster(t, 3)
	ctx := ctxT(t, 60*time.Second)
	key := testKey(t)
	const ttl = 5 * time.Second // longer than an election, so no holding lapses

	holder := newDriver(t, c.Endpoints()...)
	ho := owner()
	first, err := holder.Acquire(ctx, AcquireRequest{Key: key, Owner: ho, TTL: ttl, Waiting: true})
	if err != nil {
		t.Fatal(err)
	}

	var (
		inside  atomic.Int32
		mu      sync.Mutex
		tokens  = []uint64{first.Token}
		granted = make(chan int, waiters)
		proceed = make([]chan struct{}, waiters)
	)
	inside.Store(1) // the holder
	g, gctx := errgroup.WithContext(ctx)
	for i := 0; i < waiters; i++ {
		proceed[i] = make(chan struct{})
		d := newDriver(t, c.Endpoints()...)
		o := owner()
		queued := make(chan struct{})
		g.Go(func() error {
			gr, err := lockWait(gctx, d, AcquireRequest{Key: key, Owner: o, TTL: ttl}, func() { close(queued) })
			if err != nil {
				return fmt.Errorf("waiter %d: %w", i, err)
			}
			if !inside.CompareAndSwap(0, 1) {
				return fmt.Errorf("waiter %d: two holders at once", i)
			}
			mu.Lock()
			tokens = append(tokens, gr.Token)
			mu.Unlock()
			granted <- i
			select {
			case <-proceed[i]:
			case <-gctx.Done():
				return gctx.Err()
			}
			inside.Store(0)
			return retryUnavailable(gctx, func() error {
				return d.Release(gctx, Holding{Key: key, Owner: o, Handle: gr.Handle})
			})
		})
		// Queue the waiters one after the other, so that the order is known.
		select {
		case <-queued:
		case <-ctx.Done():
			t.Fatal("waiter never queued")
		}
	}

	killLeader := func() *testserver.Etcd {
		t.Helper()
		l, err := c.Leader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		l.Stop()
		if _, err := c.Leader(ctx); err != nil {
			t.Fatal(err)
		}
		return l
	}
	killed := killLeader()
	inside.Store(0)
	if err := retryUnavailable(ctx, func() error {
		return holder.Release(ctx, Holding{Key: key, Owner: ho, Handle: first.Handle})
	}); err != nil {
		t.Fatalf("holder's release after the leader was killed: %v", err)
	}
	if err := killed.Start(); err != nil {
		t.Fatal(err)
	}
	for n := 0; n < waiters; n++ {
		var i int
		select {
		case i = <-granted:
		case <-gctx.Done():
			t.Fatalf("waiter %d never granted: %v", n, g.Wait())
		}
		if i != n {
			t.Errorf("waiter %d granted in turn %d", i, n)
		}
		if n == 0 {
			killLeader() // while waiter 0 holds and the others wait
		}
		close(proceed[i])
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("tokens %v do not increase", tokens)
		}
	}
	if got := entries(t, holder.cli, key); len(got) != 0 {
		t.Fatalf("entries left: %v", got)
	}
}
