package pglock

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
)

func TestSyncConformance(t *testing.T) {
	dlocktest.RunSync(t, dlocktest.SyncBackend{
		New: func(t testing.TB) driver.SyncDriver { return newDriver(t) },
		TTL: 300 * time.Millisecond,
	})
}

// TestSyncForeignTableIsConflict: a sync table of another shape is reported
// with dlock.ErrConflict and left alone.
func TestSyncForeignTableIsConflict(t *testing.T) {
	pool := newPool(t)
	ctx := t.Context()
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS foreign_sync (a int)`); err != nil {
		t.Fatal(err)
	}
	d, err := NewDriver(pool, WithTable("foreign"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := dlock.NewLatch(d, "x", 2, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.CountDown(ctx); !errors.Is(err, dlock.ErrConflict) {
		t.Fatalf("CountDown over a foreign table: %v, want ErrConflict", err)
	}
	b, err := dlock.NewBarrier(d, "x", 2, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Enter(ctx); !errors.Is(err, dlock.ErrConflict) {
		t.Fatalf("Enter over a foreign table: %v, want ErrConflict", err)
	}
}

// A latch's waiter is woken by the count-down that opens it (its NOTIFY),
// not by its recheck ten seconds later.
func TestLatchWaiterIsWokenByTheCountDown(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	name := dlocktest.Key(t)
	wd := newDriver(t)
	l, err := dlock.NewLatch(wd, name, 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- l.Wait(ctx) }()
	subscribed(t, wd, 1)
	c, err := dlock.NewLatch(newDriver(t), name, 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := c.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("Wait returned %v after the count-down", time.Since(start))
	case <-time.After(5 * time.Second):
		t.Fatal("the latch's waiter not woken 5 s after the count-down that opened it")
	}
}
