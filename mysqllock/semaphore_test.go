package mysqllock

import (
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/driver"
)

// newSemaphore returns a semaphore Client of n permits over a *sql.DB of its
// own.
func newSemaphore(t testing.TB, n int, opts ...dlock.Option) *Client {
	t.Helper()
	s, err := NewSemaphoreDriver(newDB(t), n)
	if err != nil {
		t.Fatal(err)
	}
	c, err := dlock.NewClient(s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSemaphoreConformance runs the suite on a semaphore of one permit, which
// is an exclusive lock.
func TestSemaphoreConformance(t *testing.T) {
	dlocktest.Run(t, dlocktest.Backend{
		Info: driver.DriverInfo{Backend: "mysqllock", Kind: driver.KindSemaphore},
		New:  func(t testing.TB, opts ...dlock.Option) dlock.Locker { return newSemaphore(t, 1, opts...) },
		Skip: conformanceSkips,
	})
}

func TestResize(t *testing.T) {
	dlocktest.RunResize(t, dlocktest.ResizeBackend{
		New:        func(t testing.TB, n int) *dlock.Client { return newSemaphore(t, n) },
		Adopt:      StoredSize,
		MaxPermits: MaxPermits,
	})
}
