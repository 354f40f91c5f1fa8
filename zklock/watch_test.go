package zklock

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock/dlocktest"
)

// TestObserveWatches: Observe follows ZooKeeper's watches, not its one-minute
// polling interval.
func TestObserveWatches(t *testing.T) {
	observer, err := NewClient(newDriver(t))
	if err != nil {
		t.Fatal(err)
	}
	taker, err := NewClient(newDriver(t))
	if err != nil {
		t.Fatal(err)
	}
	dlocktest.ObserveWatches(t, observer, taker, 5*time.Second)
}
