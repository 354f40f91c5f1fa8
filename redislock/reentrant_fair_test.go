package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/redislock"
	"golang.org/x/sync/errgroup"
)

// TestReentrantWaitingOwnerNotStarved: while the goroutines of four processes
// (one owner ID each) keep re-entering with overlapping holds, a fifth owner
// that waits still gets regular turns: a waiting owner bars new re-entries of
// the holder, whose holds then drain. Before, it got about one turn in 8 s.
func TestReentrantWaitingOwnerNotStarved(t *testing.T) {
	const storm = 5 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	key := dlocktest.Key(t)
	stop := time.Now().Add(storm)
	var g errgroup.Group
	for p := range 4 {
		c := newReentrant(t, dlock.WithOwner(fmt.Sprintf("o%d", p)), dlock.WithTTL(3*time.Second))
		for range 10 {
			g.Go(func() error {
				for i := 0; i < 1e6 && time.Now().Before(stop); i++ {
					l, err := briefLock(ctx, c, key, 3*time.Millisecond)
					if err != nil {
						return err
					}
					if l == nil {
						continue
					}
					time.Sleep(time.Duration(rand.IntN(1000)) * time.Microsecond) // the work
					if err := l.Unlock(ctx); err != nil && !errors.Is(err, dlock.ErrNotHeld) {
						return err
					}
				}
				return nil
			})
		}
	}
	waiter := newReentrant(t, dlock.WithOwner("o4"), dlock.WithTTL(3*time.Second))
	turns := 0
	var longest time.Duration
	g.Go(func() error {
		for i := 0; i < 1e6 && time.Now().Before(stop); i++ {
			start := time.Now()
			l, err := waiter.Lock(ctx, key, dlock.WithWait(10*time.Second))
			longest = max(longest, time.Since(start))
			if err != nil {
				if errors.Is(err, dlock.ErrNotObtained) {
					continue
				}
				return err
			}
			turns++
			if err := l.Unlock(ctx); err != nil {
				return err
			}
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	t.Logf("the waiting owner had %d turns in %v; its longest wait %v", turns, storm, longest.Round(time.Millisecond))
	if turns < 10 || longest > 3*time.Second {
		t.Errorf("the waiting owner had %d turns in %v, longest wait %v: starved by overlapping re-entries", turns, storm, longest.Round(time.Millisecond))
	}
}

// TestReentrantNestedReentryWhileOwnerWaits: a re-entry nested in a hold (the
// outer call cannot give its hold up before the inner one returns) does not
// deadlock while another owner waits: it waits at most ReentryBar, and the
// waiting owner goes next once the outer hold is given up.
func TestReentrantNestedReentryWhileOwnerWaits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := dlocktest.Key(t)
	probe := newRDB(t, srv.Addr)
	a := newReentrant(t, dlock.WithOwner("job-a"))
	outer, err := a.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	other := newReentrant(t, dlock.WithOwner("job-b"))
	done := make(chan error, 1)
	go func() {
		l, err := other.Lock(ctx, key, dlock.WithWait(20*time.Second))
		if err == nil {
			err = l.Unlock(ctx)
		}
		done <- err
	}()
	eventually(t, "job-b waits", func() bool {
		return probe.HExists(ctx, redislock.LockKey(key)+":owners", "a:job-b").Val()
	})
	// A new re-entry by Lock (another goroutine) waits while job-b waits...
	if _, err := a.Lock(ctx, key, dlock.WithWait(100*time.Millisecond)); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("a new re-entry by Lock while another owner waits: %v, want ErrNotObtained", err)
	}
	// ...a single attempt re-enters at once...
	try, err := a.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("a re-entry by TryLock while another owner waits: %v", err)
	}
	if err := try.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// ...but a nested one gets in after at most ReentryBar.
	start := time.Now()
	inner, err := a.Lock(ctx, key, dlock.WithWait(10*time.Second))
	if err != nil {
		t.Fatalf("nested re-entry: %v", err)
	}
	if d := time.Since(start); d > redislock.ReentryBar+time.Second {
		t.Errorf("nested re-entry waited %v, want at most about ReentryBar (%v)", d.Round(time.Millisecond), redislock.ReentryBar)
	}
	if err := inner.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := outer.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("job-b after the holds were given up: %v", err)
	}
	eventually(t, "the waiting owners are gone", func() bool {
		return probe.Exists(ctx, redislock.LockKey(key)+":owners").Val() == 0
	})
}
