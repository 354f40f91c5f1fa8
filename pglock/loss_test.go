package pglock

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/driver"
)

// listening waits until d's LISTEN connection is up.
func listening(t testing.TB, d *Driver) {
	t.Helper()
	for range 1000 {
		d.ln.mu.Lock()
		live := d.ln.live
		d.ln.mu.Unlock()
		if live {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("no LISTEN connection within 5 s of the first lock")
}

func TestForceUnlockTellsHolderAtOnce(t *testing.T) {
	d := newDriver(t)
	fair, err := NewFairDriver(newPool(t))
	if err != nil {
		t.Fatal(err)
	}
	sem, err := NewSemaphoreDriver(newPool(t), 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []struct {
		name string
		drv  interface {
			driver.Driver
			driver.Inspector
		}
		base *Driver // whose listener tells the holder
	}{{"mutex", d, d}, {"fair", fair, fair.d}, {"semaphore", sem, sem.d}} {
		t.Run(k.name, func(t *testing.T) {
			c, err := dlock.NewClient(k.drv)
			if err != nil {
				t.Fatal(err)
			}
			took := dlocktest.PushedLoss(t, c, dlocktest.Key(t), 2*time.Second, func(ctx context.Context, l *dlock.Lease) (time.Time, error) {
				listening(t, k.base)
				start := time.Now()
				_, err := k.drv.ForceUnlock(ctx, l.Key())
				return start, err
			})
			t.Logf("ForceUnlock to Done: %v", took)
		})
	}
}

// TestForceBeforeTheListenIsTold: a force-unlock whose NOTIFY went out before
// the holder's Driver started to listen is found when it starts: its
// holdings are checked then.
func TestForceBeforeTheListenIsTold(t *testing.T) {
	d := newDriver(t)
	proceed := make(chan struct{})
	d.ln.before = func() { <-proceed }
	c, err := dlock.NewClient(d)
	if err != nil {
		t.Fatal(err)
	}
	other := newDriver(t)
	took := dlocktest.PushedLoss(t, c, dlocktest.Key(t), 2*time.Second, func(ctx context.Context, l *dlock.Lease) (time.Time, error) {
		start := time.Now()
		_, err := other.ForceUnlock(ctx, l.Key())
		close(proceed)
		return start, err
	})
	t.Logf("a force before the LISTEN to Done: %v", took)
}
