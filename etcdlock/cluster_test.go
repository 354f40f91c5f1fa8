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

// TestMemberReplacedWhileHeldAndWaited: in a 3-member cluster a follower, and
// then the leader, are replaced (killed, removed from the cluster, and a new
// member with an empty data directory added and started) while the lock is
// held and waited on. The holder keeps the lock throughout; the new members
// serve the lock's state (a Client that reaches them alone finds it held);
// and the waiter gets it once the holder releases, with a larger token.
func TestMemberReplacedWhileHeldAndWaited(t *testing.T) {
	c := testserver.StartEtcdCluster(t, 3)
	ctx := ctxT(t, 90*time.Second)
	key := testKey(t)
	newC := func(endpoints ...string) *Client {
		// Renewed: a replacement takes longer than the TTL (etcd adds a
		// member once the others have been connected for five seconds).
		cl, err := New(newEtcd(t, endpoints...), dlock.WithTTL(5*time.Second), dlock.WithAutoRenew(true))
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	endpoints := c.Endpoints()
	lease, err := newC(endpoints...).TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	queued := queuedWatch(t, ctx, newEtcd(t, endpoints...), key)
	type result struct {
		l   *dlock.Lease
		err error
	}
	waited := make(chan result, 1)
	waiter := newC(endpoints...)
	go func() {
		l, err := waiter.Lock(ctx, key)
		waited <- result{l, err}
	}()
	queued()

	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var follower *testserver.Etcd
	for _, m := range c.Members {
		if m != leader {
			follower = m
			break
		}
	}
	var fresh []string
	for _, old := range []*testserver.Etcd{follower, leader} {
		m, err := c.Replace(ctx, old)
		if err != nil {
			t.Fatalf("replacing %s: %v", old.Name, err)
		}
		fresh = append(fresh, m.Addr)
		if _, err := c.Leader(ctx); err != nil {
			t.Fatal(err)
		}
		if lease.Err() != nil {
			t.Fatalf("the holder lost the lock when %s was replaced: %v", old.Name, lease.Err())
		}
	}
	probe := newC(fresh...)
	err = retryUnavailable(ctx, func() error {
		l, err := probe.TryLock(ctx, key)
		if err == nil {
			_ = l.Unlock(ctx)
			return errors.New("a Client on the new members took the held lock")
		}
		return err
	})
	if !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock through the new members alone: %v, want ErrNotObtained", err)
	}
	select {
	case r := <-waited:
		t.Fatalf("the waiter returned while the lock was held: %v", r.err)
	default:
	}
	if err := retryUnavailable(ctx, func() error { return lease.Unlock(ctx) }); err != nil {
		t.Fatalf("the holder's Unlock after the replacements: %v", err)
	}
	r := <-waited
	if r.err != nil {
		t.Fatalf("the waiter: %v", r.err)
	}
	if r.l.Token() <= lease.Token() {
		t.Errorf("the waiter's token %d, not above the holder's %d", r.l.Token(), lease.Token())
	}
	if err := retryUnavailable(ctx, func() error { return r.l.Unlock(ctx) }); err != nil {
		t.Fatal(err)
	}
}
