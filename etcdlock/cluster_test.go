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

// TestLeaderKilledWhileHeldAndWaited runs a holder and waiting Lock calls, each
// with its own client to all members of a 3-member cluster, kills the leader
// while the lock is held and the waiters wait, brings it back, and kills the
// next leader while a waiter holds. Nobody may ever hold the lock together with
// another, every waiter must get it in queue order, and tokens must increase.
func TestLeaderKilledWhileHeldAndWaited(t *testing.T) {
	const waiters = 3
	c := testserver.StartEtcdCluster(t, 3)
	ctx := ctxT(t, 60*time.Second)
	key := testKey(t)
	// Longer than an election, so that no holding lapses while the cluster
	// has no leader; the waiters' leases are renewed by their attempts.
	ttl := dlock.WithTTL(5 * time.Second)
	newC := func() *Client {
		cl, err := New(newEtcd(t, c.Endpoints()...), ttl)
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	lease, err := newC().TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var (
		inside  atomic.Int32
		mu      sync.Mutex
		tokens  = []uint64{lease.Token()}
		granted = make(chan int, waiters)
		proceed = make([]chan struct{}, waiters)
	)
	inside.Store(1) // the holder
	next := queuedWatch(t, ctx, newEtcd(t, c.Endpoints()...), key)
	g, gctx := errgroup.WithContext(ctx)
	for i := 0; i < waiters; i++ {
		proceed[i] = make(chan struct{})
		cl := newC()
		g.Go(func() error {
			l, err := cl.Lock(gctx, key)
			if err != nil {
				return fmt.Errorf("waiter %d: %w", i, err)
			}
			if !inside.CompareAndSwap(0, 1) {
				return fmt.Errorf("waiter %d: two holders at once", i)
			}
			mu.Lock()
			tokens = append(tokens, l.Token())
			mu.Unlock()
			granted <- i
			select {
			case <-proceed[i]:
			case <-gctx.Done():
				return gctx.Err()
			}
			if l.Err() != nil {
				return fmt.Errorf("waiter %d lost the lock: %w", i, l.Err())
			}
			inside.Store(0)
			return retryUnavailable(gctx, func() error { return l.Unlock(gctx) })
		})
		next() // queued: the next waiter queues behind it
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
	if lease.Err() != nil {
		t.Fatalf("holder lost the lock across an election: %v", lease.Err())
	}
	inside.Store(0)
	if err := retryUnavailable(ctx, func() error { return lease.Unlock(ctx) }); err != nil {
		t.Fatalf("holder's Unlock after the leader was killed: %v", err)
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
	if got := entries(t, newEtcd(t, c.Endpoints()...), key); len(got) != 0 {
		t.Fatalf("entries left: %v", got)
	}
}
