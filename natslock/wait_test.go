package natslock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/driver"
)

// TestSubscribeAfterTheReleaseWakes: a waiter whose attempt found the key
// held, and that subscribes only after the Driver's watch saw the key freed,
// is woken at once instead of sleeping out its minute.
func TestSubscribeAfterTheReleaseWakes(t *testing.T) {
	holder, waiter := newDriver(t), newDriver(t)
	ctx := ctxT(t, 10*time.Second)
	key := dlocktest.Key(t)
	g, err := holder.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: "holder", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// The waiter's Driver watches the key (as after an earlier wait).
	obs, err := waiter.WatchKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	_, err = waiter.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: "waiter", TTL: 10 * time.Second, Waiting: true})
	var taken *driver.Taken
	if !errors.As(err, &taken) {
		t.Fatalf("attempt on a held key: %v", err)
	}
	for len(obs) > 0 {
		<-obs
	}
	if err := holder.Release(ctx, driver.Holding{Key: key, Owner: "holder", Handle: g.Handle}); err != nil {
		t.Fatal(err)
	}
	select { // the waiter's watch sees the deletion
	case <-obs:
	case <-ctx.Done():
		t.Fatal("the watch did not see the release")
	}
	wake, cancel, err := waiter.Subscribe(ctx, driver.Holding{Key: key, Owner: "waiter", Handle: taken.Handle})
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	select {
	case <-wake:
	case <-time.After(2 * time.Second):
		t.Fatal("a waiter that subscribed after the release was not woken")
	}
}

// TestContendedKeyChangesHands: two processes (Drivers) that lock a key in
// a loop share it: the releasing one leaves the key to the waiter its
// release woke, instead of taking it again a round trip ahead of it.
func TestContendedKeyChangesHands(t *testing.T) {
	key := dlocktest.Key(t)
	const total = 120
	var done atomic.Int64
	var last atomic.Int64
	var handoffs atomic.Int64
	per := make([]int64, 2)
	ctx := ctxT(t, 60*time.Second)
	var wg sync.WaitGroup
	for i := range 2 {
		c := newClient(t, dlock.WithTTL(5*time.Second))
		wg.Go(func() {
			for done.Load() < total && ctx.Err() == nil {
				l, err := c.Lock(ctx, key)
				if err != nil {
					t.Error(err)
					return
				}
				if p := last.Swap(int64(i + 1)); p != 0 && p != int64(i+1) {
					handoffs.Add(1)
				}
				per[i]++
				done.Add(1)
				if err := l.Unlock(context.Background()); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("critical sections %v, hand-overs %d", per, handoffs.Load())
	if h := handoffs.Load(); h < total/3 {
		t.Errorf("%d hand-overs in %d critical sections of two contenders (shares %v), want at least a third", h, done.Load(), per)
	}
}
