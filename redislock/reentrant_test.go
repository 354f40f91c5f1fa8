package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/redislock"
	"golang.org/x/sync/errgroup"
)

func newReentrant(t testing.TB, opts ...dlock.Option) *redislock.Client {
	c, err := redislock.NewReentrant(newRDB(t, srv.Addr), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func holds(t *testing.T, c *redislock.Client, key string) (int, string) {
	t.Helper()
	n, holder, err := c.Driver().(*redislock.ReentrantDriver).Holds(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return n, holder
}

// Without an owner ID every acquisition is its own owner: a plain mutex.
func TestReentrantConformance(t *testing.T) {
	dlocktest.Run(t, dlocktest.Backend{
		Info: driver.DriverInfo{Backend: "redislock", Kind: driver.KindReentrant},
		New:  func(t testing.TB, opts ...dlock.Option) dlock.Locker { return newReentrant(t, opts...) },
	})
}

func TestReentrantCountsHolds(t *testing.T) {
	ctx := context.Background()
	key := dlocktest.Key(t)
	a := newReentrant(t, dlock.WithOwner("job-a"))
	other := newReentrant(t, dlock.WithOwner("job-b"))
	l1, err := a.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// Another process with the same owner ID re-enters.
	l2, err := newReentrant(t, dlock.WithOwner("job-a")).TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if l2.Token() != l1.Token() || !strings.HasPrefix(l2.Owner(), "job-a"+driver.OwnerSep) {
		t.Errorf("re-entry token %d owner %q, want token %d and owner job-a#...", l2.Token(), l2.Owner(), l1.Token())
	}
	if n, holder := holds(t, a, key); n != 2 || holder != "job-a" {
		t.Fatalf("holds %d by %q, want 2 by job-a", n, holder)
	}
	if info, err := a.Inspect(ctx, key); err != nil || info.Owner != "job-a" {
		t.Fatalf("Inspect: %+v %v", info, err)
	}
	if _, err := other.TryLock(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("other owner: %v, want ErrNotObtained", err)
	}
	if err := l1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l1.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("second Unlock of one lease: %v, want ErrNotHeld", err)
	}
	if n, _ := holds(t, a, key); n != 1 {
		t.Fatalf("after one Unlock: %d holds, want 1", n)
	}
	if _, err := other.TryLock(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("other owner with one hold left: %v, want ErrNotObtained", err)
	}
	if err := l2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := holds(t, a, key); n != 0 {
		t.Fatalf("after the last Unlock: %d holds, want 0", n)
	}
	lb, err := other.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if lb.Token() <= l1.Token() {
		t.Errorf("next holding's token %d not above %d", lb.Token(), l1.Token())
	}
	unlockT(t, lb)
}

// An attempt retried after its reply was lost finds its hold: one acquisition
// is one hold, however many attempts it takes.
func TestReentrantRetriedAttemptCountsOnce(t *testing.T) {
	ctx := context.Background()
	key := dlocktest.Key(t)
	c := newReentrant(t)
	d := c.Driver()
	r := driver.AcquireRequest{Key: key, Owner: "svc#0123abcd", TTL: 5 * time.Second}
	g1, err := d.Acquire(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	g2, err := d.Acquire(ctx, r) // the retry
	if err != nil || g2.Token != g1.Token {
		t.Fatalf("retry: %+v %v, want token %d", g2, err, g1.Token)
	}
	r.Owner = "svc#4567ef01" // a second acquisition by the same holder
	if _, err := d.Acquire(ctx, r); err != nil {
		t.Fatal(err)
	}
	if n, _ := holds(t, c, key); n != 2 {
		t.Fatalf("%d holds, want 2", n)
	}
	for _, o := range []string{"svc#0123abcd", "svc#4567ef01"} {
		if err := d.Release(ctx, driver.Holding{Key: key, Owner: o}); err != nil {
			t.Fatal(err)
		}
		if err := d.Release(ctx, driver.Holding{Key: key, Owner: o}); !errors.Is(err, dlock.ErrNotHeld) {
			t.Fatalf("release of a hold given up already: %v", err)
		}
	}
	if n, _ := holds(t, c, key); n != 0 {
		t.Fatalf("%d holds after releasing both, want 0", n)
	}
}

// One renewing lease keeps the holding alive for a re-entry with a short fixed
// TTL, whose lease ends at its own deadline and gives up only its own hold.
func TestReentrantWatchdogKeepsWholeHolding(t *testing.T) {
	ctx := context.Background()
	key := dlocktest.Key(t)
	a := newReentrant(t, dlock.WithOwner("worker"))
	outer, err := a.Lock(ctx, key, dlock.WithTTL(600*time.Millisecond), dlock.WithAutoRenew(true))
	if err != nil {
		t.Fatal(err)
	}
	inner, err := a.Lock(ctx, key, dlock.WithTTL(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	<-inner.Done()
	if !errors.Is(inner.Err(), dlock.ErrLockLost) {
		t.Fatalf("inner lease ended with %v, want ErrLockLost", inner.Err())
	}
	_ = inner.Unlock(ctx) // waits for the release that followed the loss
	if n, _ := holds(t, a, key); n != 1 {
		t.Fatalf("%d holds after the inner lease ran out, want 1", n)
	}
	// Past several of the outer TTLs, the outer lease still holds.
	if _, err := newReentrant(t).Lock(ctx, key, dlock.WithWait(1500*time.Millisecond)); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("another owner during the outer hold: %v, want ErrNotObtained", err)
	}
	if outer.Err() != nil {
		t.Fatalf("outer lease: %v", outer.Err())
	}
	unlockT(t, outer)
}

// A holder that dies with two holds frees the lock at the holding's TTL; a
// waiter takes it then.
func TestReentrantCrashedHolderFreesAtTTL(t *testing.T) {
	ctx := context.Background()
	key := dlocktest.Key(t)
	d := newReentrant(t).Driver()
	for _, o := range []string{"dead#01", "dead#02"} {
		if _, err := d.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: o, TTL: 300 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	l, err := newReentrant(t).Lock(ctx, key, dlock.WithWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("took the lock %v after a 300ms TTL", el)
	}
	unlockT(t, l)
}

// A waiter cancelled while waiting leaves no hold, abandon mark aside, and the
// holder's count is untouched.
func TestReentrantCancelledWaiterLeavesNothing(t *testing.T) {
	ctx := context.Background()
	key := dlocktest.Key(t)
	a := newReentrant(t, dlock.WithOwner("a"))
	l, err := a.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	defer cancel()
	if _, err := newReentrant(t, dlock.WithOwner("b")).Lock(wctx, key); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiter: %v, want DeadlineExceeded", err)
	}
	fields, err := newRDB(t, srv.Addr).HGetAll(ctx, redislock.LockKey(key)).Result()
	if err != nil {
		t.Fatal(err)
	}
	nh := 0
	for f := range fields {
		if strings.HasPrefix(f, "h:") {
			nh++
		}
	}
	if fields["o"] != "a" || fields["c"] != "1" || nh != 1 {
		t.Fatalf("lock hash after the cancelled wait: %v", fields)
	}
	unlockT(t, l)
}

func TestReentrantBadOwner(t *testing.T) {
	for _, id := range []string{"", "has space", "tab\t", "é", "a/b", "a#b", "{x}", "50%", strings.Repeat("x", driver.MaxOwnerLen+1)} {
		if _, err := redislock.NewReentrant(newRDB(t, srv.Addr), dlock.WithOwner(id)); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("NewReentrant(WithOwner(%q)): %v, want ErrInvalid", id, err)
		}
		if _, err := newReentrant(t).TryLock(context.Background(), "k", dlock.WithOwner(id)); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("TryLock(WithOwner(%q)): %v, want ErrInvalid", id, err)
		}
	}
	if _, _, err := newReentrant(t).Driver().(*redislock.ReentrantDriver).Holds(context.Background(), "{x}"); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Holds of a bad key: %v", err)
	}
}

// Several Clients in three owner groups, each goroutine re-entering once: only
// one group is ever inside, and every hold is given back.
func TestReentrantOneGroupAtATime(t *testing.T) {
	const groups, clients, rounds = 3, 2, 8
	key := dlocktest.Key(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var mu sync.Mutex
	inside := map[string]int{}
	enter := func(id string, d int) error {
		mu.Lock()
		defer mu.Unlock()
		for o, n := range inside {
			if o != id && n > 0 {
				return fmt.Errorf("%s inside while %s holds %d", id, o, n)
			}
		}
		inside[id] += d
		return nil
	}
	g, gctx := errgroup.WithContext(ctx)
	var probe *redislock.Client
	for i := 0; i < groups; i++ {
		id := fmt.Sprintf("group-%d", i)
		for j := 0; j < clients; j++ {
			c := newReentrant(t, dlock.WithOwner(id), dlock.WithRetry(dlock.ExponentialBackoff(time.Millisecond, 20*time.Millisecond)))
			probe = c
			g.Go(func() error {
				for r := 0; r < rounds; r++ {
					outer, err := c.Lock(gctx, key)
					if err != nil {
						return err
					}
					if err := enter(id, 1); err != nil {
						return err
					}
					inner, err := c.TryLock(gctx, key)
					if err != nil {
						return fmt.Errorf("re-entry: %w", err)
					}
					if inner.Token() != outer.Token() {
						return fmt.Errorf("re-entry token %d, holding's %d", inner.Token(), outer.Token())
					}
					if err := enter(id, -1); err != nil {
						return err
					}
					if err := errors.Join(inner.Unlock(gctx), outer.Unlock(gctx)); err != nil {
						return err
					}
				}
				return nil
			})
		}
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if n, holder := holds(t, probe, key); n != 0 {
		t.Fatalf("%d holds left by %q", n, holder)
	}
}

func unlockT(t *testing.T, l *dlock.Lease) {
	t.Helper()
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// ForceUnlock removes every hold, and the holder's Leases learn of it at their
// next renewal.
func TestReentrantForceUnlockRemovesEveryHold(t *testing.T) {
	ctx := context.Background()
	key := dlocktest.Key(t)
	a := newReentrant(t, dlock.WithOwner("stuck"))
	l1, err := a.Lock(ctx, key, dlock.WithTTL(300*time.Millisecond), dlock.WithAutoRenew(true))
	if err != nil {
		t.Fatal(err)
	}
	l2, err := a.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	info, err := newReentrant(t).ForceUnlock(ctx, key)
	if err != nil || info.Owner != "stuck" {
		t.Fatalf("ForceUnlock: %+v %v", info, err)
	}
	if n, _ := holds(t, a, key); n != 0 {
		t.Fatalf("%d holds after ForceUnlock", n)
	}
	<-l1.Done()
	if !errors.Is(l1.Err(), dlock.ErrLockLost) {
		t.Fatalf("l1: %v", l1.Err())
	}
	if err := l2.Extend(ctx, time.Second); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("l2 Extend: %v", err)
	}
}

// BenchmarkReentrantReenter is one re-entry and its Unlock while the holder
// holds the lock (two round trips), with a fixed TTL so that no watchdog runs.
func BenchmarkReentrantReenter(b *testing.B) {
	c := newReentrant(b, dlock.WithOwner("bench"), dlock.WithTTL(10*time.Second))
	key := dlocktest.Key(b)
	ctx := context.Background()
	outer, err := c.TryLock(ctx, key)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		l, err := c.TryLock(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
	if err := outer.Unlock(ctx); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkOptimisticUpdate is one uncontended Update (a read and a write).
func BenchmarkOptimisticUpdate(b *testing.B) {
	o := newOptimistic(b)
	key := dlocktest.Key(b)
	ctx := context.Background()
	for b.Loop() {
		if _, err := o.Update(ctx, key, incr, nil); err != nil {
			b.Fatal(err)
		}
	}
}
