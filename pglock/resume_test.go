package pglock

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/driver"
)

// TestResumedLeaseIsToldAtOnce: a holding taken up by another Driver with
// Resume is registered for the loss notification as a grant is.
func TestResumedLeaseIsToldAtOnce(t *testing.T) {
	from, to := newDriver(t), newDriver(t)
	fairFrom, err := NewFairDriver(newPool(t))
	if err != nil {
		t.Fatal(err)
	}
	fairTo, err := NewFairDriver(newPool(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []struct {
		name     string
		from, to driver.Driver
		base     *Driver // whose listener tells the holder
	}{{"mutex", from, to, to}, {"fair", fairFrom, fairTo, fairTo.d}} {
		t.Run(k.name, func(t *testing.T) {
			a, err := dlock.NewClient(k.from)
			if err != nil {
				t.Fatal(err)
			}
			b, err := dlock.NewClient(k.to)
			if err != nil {
				t.Fatal(err)
			}
			took := dlocktest.PushedLoss(t, dlocktest.Resumed(a, b), dlocktest.Key(t), 2*time.Second, func(ctx context.Context, l *dlock.Lease) (time.Time, error) {
				listening(t, k.base)
				start := time.Now()
				_, err := from.ForceUnlock(ctx, l.Key())
				return start, err
			})
			t.Logf("ForceUnlock to Done: %v", took)
		})
	}
}
