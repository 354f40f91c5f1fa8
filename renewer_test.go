package dlock_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/memlock"
)

// renewCounter counts the successful renewals of each key, and runs then, when
// set, on the first of them.
type renewCounter struct {
	dlock.NopObserver
	mu   sync.Mutex
	ok   map[string]int
	then func(key string)
	once sync.Once
}

func (r *renewCounter) Renewal(_ context.Context, e dlock.RenewalEvent) {
	if e.Err != nil {
		return
	}
	r.mu.Lock()
	if r.ok == nil {
		r.ok = map[string]int{}
	}
	r.ok[e.Key]++
	then := r.then
	r.mu.Unlock()
	if then != nil {
		r.once.Do(func() { then(e.Key) })
	}
}

func (r *renewCounter) count(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ok[key]
}

// TestRenewalCostsNoGoroutinePerLease: a Client's renewing leases are renewed
// without a goroutine each (memlock has no ExtendMany: a round runs at most 32
// Extends at a time), and every one of them is renewed.
func TestRenewalCostsNoGoroutinePerLease(t *testing.T) {
	const k = 4000
	ctx := context.Background()
	obs := &renewCounter{}
	c, err := memlock.New(memlock.NewStore(), dlock.WithTTL(10*time.Second), dlock.WithAutoRenew(true),
		dlock.WithRenewEvery(time.Second), dlock.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	leases := make([]*dlock.Lease, k)
	for i := range leases {
		if leases[i], err = c.TryLock(ctx, fmt.Sprintf("%s:%d", t.Name(), i)); err != nil {
			t.Fatal(err)
		}
	}
	most := 0
	for _, l := range leases {
		for obs.count(l.Key()) < 1 {
			most = max(most, runtime.NumGoroutine()-before)
			select {
			case <-l.Done():
				t.Fatalf("lease %s: %v", l.Key(), l.Err())
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	t.Logf("%d leases renewed with at most %d more goroutines", k, most)
	if most > k/100 {
		t.Errorf("%d renewing leases ran %d more goroutines, want at most %d", k, most, k/100)
	}
	for _, l := range leases {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestExtendNotHeldUpByRenewalEvents: while the Observer is told of one
// lease's renewal (slowly), the holder of another lease renewed in the same
// round may extend it.
func TestExtendNotHeldUpByRenewalEvents(t *testing.T) {
	ctx := context.Background()
	obs := &renewCounter{}
	c, err := memlock.New(memlock.NewStore(), dlock.WithTTL(5*time.Second), dlock.WithAutoRenew(true),
		dlock.WithRenewEvery(100*time.Millisecond), dlock.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.TryLock(ctx, t.Name()+":a")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Unlock(ctx)
	b, err := c.TryLock(ctx, t.Name()+":b")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Unlock(ctx)
	told := make(chan string, 1)
	release := make(chan struct{})
	obs.mu.Lock()
	obs.then = func(key string) {
		told <- key
		select {
		case <-release:
		case <-time.After(5 * time.Second):
		}
	}
	obs.mu.Unlock()
	var key string
	select {
	case key = <-told:
	case <-time.After(10 * time.Second):
		t.Fatal("no renewal in 10s")
	}
	other := b
	if key == b.Key() {
		other = a
	}
	ectx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	err = other.Extend(ectx, 5*time.Second)
	close(release)
	if err != nil {
		t.Fatalf("Extend of a lease while another's renewal is told: %v", err)
	}
}
