package mysqllock

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/driver"
)

func TestSync(t *testing.T) {
	dlocktest.RunSync(t, dlocktest.SyncBackend{
		New: func(t testing.TB) driver.SyncDriver { return newDriver(t) },
	})
}

// TestSyncChangesWakeWaitersAtOnce: a latch's or a barrier's waiter on one
// Driver is woken when another Driver counts the latch down to zero, opens
// the barrier or leaves it last, without a poll, and its watch row is gone
// once it stops waiting. (The waiters polled every 100 ms: WatchSync was
// refused.)
func TestSyncChangesWakeWaitersAtOnce(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	waiter, changer := newDriver(t), newDriver(t)
	name := dlocktest.Key(t)
	watch := func(step string, change func() error) {
		t.Helper()
		wake, cancel, err := waiter.WatchSync(ctx, name)
		if err != nil {
			t.Fatalf("%s: WatchSync: %v", step, err)
		}
		// A wake-up of the subscription itself is not the change's.
		select {
		case <-wake:
		default:
		}
		start := time.Now()
		if err := change(); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		select {
		case <-wake:
			t.Logf("%s: woken %v after the change began", step, time.Since(start))
		case <-time.After(2 * time.Second):
			t.Fatalf("%s: the waiter was not woken", step)
		}
		cancel()
		var rows int
		if err := changer.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM dlock_locks_sync WHERE kind = 'watch' AND name = ?", name).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		if rows != 0 {
			t.Fatalf("%s: %d watch rows left after the waiter stopped", step, rows)
		}
	}
	watch("latch", func() error {
		if _, err := changer.CountDown(ctx, name, 2, time.Minute); err != nil {
			return err
		}
		_, err := changer.CountDown(ctx, name, 2, time.Minute)
		return err
	})
	name = "b" + name
	watch("barrier open", func() error {
		_, err := changer.Arrive(ctx, name, "p1", 1, time.Minute)
		return err
	})
	watch("barrier left", func() error {
		_, _, err := changer.Depart(ctx, name, "p1", 1)
		return err
	})
}
