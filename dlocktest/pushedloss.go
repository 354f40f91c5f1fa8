package dlocktest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// PushedTTL is the TTL of the lease PushedLoss takes: renewed every 8 s, so
// that a loss found by a renewal or the local deadline cannot pass for a
// pushed one (and within ZooKeeper's longest TTL).
const PushedTTL = 24 * time.Second

// PushedLoss checks that a lease whose lock is taken away in the store is lost
// as soon as the store says so (driver.Grant.Lost): it takes key through l
// with a TTL of PushedTTL and an Observer, has remove take the lock away (a
// ForceUnlock, or a deletion by another client of the store; remove returns
// when it started doing so), and wants the lease's Done closed within within,
// far below the renewal interval, with an error matching dlock.ErrLockLost,
// exactly one Observer Loss event of cause dlock.LossStoreSignal, and Unlock
// then returning the loss. It returns the time from the start of the removal
// to Done.
func PushedLoss(t testing.TB, l dlock.Locker, key string, within time.Duration,
	remove func(ctx context.Context, lease *dlock.Lease) (started time.Time, err error)) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), PushedTTL)
	defer cancel()
	obs := &lossCounter{}
	lease, err := l.TryLock(ctx, key, dlock.WithTTL(PushedTTL), dlock.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	started, err := remove(ctx, lease)
	if err != nil {
		_ = lease.Unlock(ctx)
		t.Fatalf("removing the lock: %v", err)
	}
	var took time.Duration
	select {
	case <-lease.Done():
		took = time.Since(started)
	case <-time.After(within):
		_ = lease.Unlock(ctx)
		t.Fatalf("the lease's Done did not close within %v of the removal (renewals every %v)", within, PushedTTL/3)
	}
	if err := lease.Err(); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("Err after the removal: %v, want ErrLockLost", err)
	}
	if err := lease.Unlock(ctx); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("Unlock after the loss: %v, want ErrLockLost", err)
	}
	if got := obs.causes(); len(got) != 1 || got[0] != dlock.LossStoreSignal {
		t.Errorf("Observer loss causes %v, want [%s]", got, dlock.LossStoreSignal)
	}
	return took
}

// lossCounter is an Observer that records the causes of its losses.
type lossCounter struct {
	dlock.NopObserver
	mu   sync.Mutex
	seen []dlock.LossCause
}

func (o *lossCounter) Loss(_ context.Context, e dlock.LossEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seen = append(o.seen, e.Cause)
}

func (o *lossCounter) causes() []dlock.LossCause {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]dlock.LossCause(nil), o.seen...)
}
