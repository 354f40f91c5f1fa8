package mysqllock

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
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
