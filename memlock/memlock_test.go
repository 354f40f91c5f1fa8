package memlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/memlock"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	store := memlock.NewStore()
	dlocktest.Run(t, dlocktest.Backend{
		Info: driver.DriverInfo{Backend: "memlock", Kind: driver.KindMutex},
		New: func(t testing.TB, opts ...dlock.Option) dlock.Locker {
			c, err := memlock.New(store, opts...)
			if err != nil {
				t.Fatal(err)
			}
			return c
		},
	})
}

func TestInspection(t *testing.T) {
	ctx := context.Background()
	store := memlock.NewStore()
	a, _ := memlock.New(store)
	l, err := a.TryLock(ctx, "jobs:1", dlock.WithMetadata("host a"))
	if err != nil {
		t.Fatal(err)
	}
	var insp driver.Inspector = a
	info, err := insp.Inspect(ctx, "jobs:1")
	if err != nil || !info.Held || info.Owner != l.Owner() || info.Token != l.Token() || info.Metadata != "host a" || info.TTL <= 0 {
		t.Fatalf("Inspect: %+v, %v", info, err)
	}
	if _, err := a.TryLock(ctx, "other"); err != nil {
		t.Fatal(err)
	}
	infos, err := driver.List(ctx, insp, "jobs:*")
	if err != nil || len(infos) != 1 || infos[0].Key != "jobs:1" {
		t.Fatalf("List: %+v, %v", infos, err)
	}
	if _, err := insp.ForceUnlock(ctx, "jobs:1"); err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Extend after ForceUnlock: %v", err)
	}
	if _, err := insp.ForceUnlock(ctx, "jobs:1"); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("ForceUnlock of a free lock: %v", err)
	}
	if _, err := insp.Inspect(ctx, ""); !errors.Is(err, dlock.ErrInvalid) {
		t.Fatalf("Inspect(\"\"): %v", err)
	}
	if _, err := memlock.New(nil); !errors.Is(err, dlock.ErrInvalid) {
		t.Fatalf("New(nil): %v", err)
	}
}

func TestForceUnlockTellsHolderAtOnce(t *testing.T) {
	store := memlock.NewStore()
	c, _ := memlock.New(store)
	took := dlocktest.PushedLoss(t, c, dlocktest.Key(t), time.Second, func(ctx context.Context, l *dlock.Lease) (time.Time, error) {
		start := time.Now()
		_, err := store.ForceUnlock(ctx, l.Key())
		return start, err
	})
	t.Logf("ForceUnlock to Done: %v", took)
}
