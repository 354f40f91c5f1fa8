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
