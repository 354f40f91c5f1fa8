package dlocktest

import (
	"context"
	"testing"

	"github.com/dlock-go/dlock"
)

// AllocsPerCycle returns the heap allocations per uncontended Lock and Unlock
// of key through l, averaged over runs cycles after a first one (which may
// create what a backend makes once), and fails t when a cycle fails or the
// count is above most. Allocations made meanwhile by other goroutines (a
// backend's calls still on their way when Unlock returns) count too.
func AllocsPerCycle(t testing.TB, ctx context.Context, l dlock.Locker, key string, runs int, most float64) float64 {
	t.Helper()
	var failed error
	cycle := func() {
		lease, err := l.Lock(ctx, key)
		if err != nil {
			failed = err
			return
		}
		if err := lease.Unlock(ctx); err != nil {
			failed = err
		}
	}
	cycle()
	allocs := testing.AllocsPerRun(runs, cycle)
	if failed != nil {
		t.Fatal(failed)
	}
	if allocs > most {
		t.Errorf("%.0f allocations per lock and unlock, want at most %.0f", allocs, most)
	}
	t.Logf("%.0f allocations per lock and unlock", allocs)
	return allocs
}
