package mysqllock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testserver"
)

// TestReleaseWakesWaiterAtOnce: a waiter of a lock held with a long TTL gets
// it as soon as the holder releases, not when the TTL runs out or at a poll.
func TestReleaseWakesWaiterAtOnce(t *testing.T) {
	ctx := context.Background()
	holder, waiter := newClient(t), newClient(t)
	key := dlocktest.Key(t)
	probe := newDB(t)
	for i := 0; i < 5; i++ {
		l, err := holder.Lock(ctx, key, dlock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan time.Time, 1)
		go func() {
			w, err := waiter.Lock(ctx, key, dlock.WithTTL(30*time.Second), dlock.WithWait(10*time.Second))
			if err != nil {
				t.Error(err)
				got <- time.Time{}
				return
			}
			got <- time.Now()
			_ = w.Unlock(ctx)
		}()
		// The waiter's first attempt has queued it once the row names it.
		testserver.Eventually(t, 5*time.Second, "the waiter queued", func() bool {
			var w string
			_ = probe.QueryRowContext(ctx, "SELECT waiters FROM dlock_locks WHERE lock_key = ?", key).Scan(&w)
			return w != ""
		})
		released := time.Now()
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		at := <-got
		if at.IsZero() {
			return
		}
		if took := at.Sub(released); took > time.Second {
			t.Fatalf("hand-over %d took %v after the release", i, took)
		} else {
			t.Logf("hand-over %d: %v", i, took)
		}
	}
}

// TestKilledWaitsWakeAtOnce: the waiting connections of eight Drivers, each
// interrupted by KILL QUERY again and again from other sessions, all at once,
// wake their Drivers' waiters within a tenth of a second each time, and the
// KILL returns as fast. (A wait in SELECT SLEEP took two seconds to
// interrupt on MariaDB once several sessions slept.)
func TestKilledWaitsWakeAtOnce(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	const drivers, rounds = 8, 10
	type waiter struct {
		id   int64
		wake <-chan struct{}
	}
	ws := make([]waiter, drivers)
	for i := range ws {
		d := newDriver(t)
		id, m := d.w.ensure(ctx)
		if id == 0 {
			t.Fatal("no waiting connection")
		}
		wake, cancel, err := d.w.subscribe(driver.Holding{Key: "k", Handle: m})
		d.w.used()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cancel)
		ws[i] = waiter{id, wake}
	}
	killer := newDB(t)
	killer.SetMaxIdleConns(drivers)
	var mu sync.Mutex
	var slowest time.Duration
	for r := 0; r < rounds; r++ {
		var wg sync.WaitGroup
		errs := make(chan error, drivers)
		for _, w := range ws {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				if _, err := killer.ExecContext(ctx, fmt.Sprintf("KILL QUERY %d", w.id)); err != nil {
					errs <- err
					return
				}
				select {
				case <-w.wake:
				case <-time.After(2 * time.Second):
					errs <- fmt.Errorf("connection %d: no wake-up 2 s after the KILL", w.id)
					return
				}
				if took := time.Since(start); took > 100*time.Millisecond {
					errs <- fmt.Errorf("connection %d: KILL to wake-up %v", w.id, took)
				} else {
					mu.Lock()
					slowest = max(slowest, took)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: %v", r, err)
		}
		// The next KILL must find each connection waiting again: a KILL
		// between two waits is lost, which this test is not about.
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("slowest KILL to wake-up: %v", slowest)
}

// TestReleaseHandsOverToTheWokenWaiter: a holder that unlocks and at once
// tries again finds the key kept for the waiter its release woke, which gets
// it (before, the releaser took it back in most rounds, ahead of the waiter
// still being woken).
func TestReleaseHandsOverToTheWokenWaiter(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	holder, waiter := newClient(t), newClient(t)
	key := dlocktest.Key(t)
	probe := newDB(t)
	l, err := holder.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		got := make(chan *dlock.Lease, 1)
		go func() {
			w, err := waiter.Lock(ctx, key, dlock.WithWait(10*time.Second))
			if err != nil {
				t.Error(err)
			}
			got <- w
		}()
		testserver.Eventually(t, 5*time.Second, "the waiter queued", func() bool {
			var w string
			_ = probe.QueryRowContext(ctx, "SELECT waiters FROM dlock_locks WHERE lock_key = ?", key).Scan(&w)
			return w != ""
		})
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if again, err := holder.TryLock(ctx, key); err == nil {
			_ = again.Unlock(ctx)
			t.Fatalf("round %d: the releaser took the key back ahead of the waiter it woke", i)
		} else if !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatal(err)
		}
		w := <-got
		if w == nil {
			return
		}
		if err := w.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if l, err = holder.Lock(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	_ = l.Unlock(ctx)
}
