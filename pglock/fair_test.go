package pglock

import (
	"testing"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
)

func newFair(t testing.TB, opts ...dlock.Option) (*Client, *FairDriver) {
	t.Helper()
	f, err := NewFairDriver(newPool(t))
	if err != nil {
		t.Fatal(err)
	}
	c, err := dlock.NewClient(f, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c, f
}

func TestFairConformance(t *testing.T) {
	dlocktest.Run(t, dlocktest.Backend{
		Info: driver.DriverInfo{Backend: "pglock", Kind: driver.KindFair},
		New: func(t testing.TB, opts ...dlock.Option) dlock.Locker {
			c, _ := newFair(t, opts...)
			return c
		},
		Skip: map[string]string{
			"ForeignDataIsConflict": "a table row is always a lock; a table of another shape is ErrConflict (TestForeignTableIsConflict)",
		},
	})
}

// Waiters of several processes get the lock in the order they queued, and a
// TryLock does not overtake them; a waiter that gives up leaves the queue at
// once, one that dies (stops attempting) is dropped after FairWaiterTTL.
func TestFair(t *testing.T) {
	dlocktest.RunFair(t, dlocktest.FairBackend{
		New: func(t testing.TB, opts ...dlock.Option) (dlock.Locker, dlocktest.FairDriver) {
			return newFair(t, opts...)
		},
		WaiterTTL: FairWaiterTTL,
	})
}
