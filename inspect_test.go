package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/memlock"
)

// A driver that only locks: the Driver methods of a Store, without its
// Inspector.
type lockOnly struct{ s *memlock.Store }

func (d lockOnly) Acquire(ctx context.Context, r driver.AcquireRequest) (driver.Grant, error) {
	return d.s.Acquire(ctx, r)
}
func (d lockOnly) Extend(ctx context.Context, h driver.Holding, ttl time.Duration) (time.Duration, error) {
	return d.s.Extend(ctx, h, ttl)
}
func (d lockOnly) Release(ctx context.Context, h driver.Holding) error { return d.s.Release(ctx, h) }
func (d lockOnly) TTL(ctx context.Context, h driver.Holding) (time.Duration, error) {
	return d.s.TTL(ctx, h)
}
func (d lockOnly) Info() driver.DriverInfo { return d.s.Info() }

func TestClientInspectsThroughItsDriver(t *testing.T) {
	ctx := context.Background()
	c, err := memlock.New(memlock.NewStore())
	if err != nil {
		t.Fatal(err)
	}
	lease, err := c.TryLock(ctx, "inspected", dlock.WithMetadata("m"))
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Inspect(ctx, "inspected")
	if err != nil || !info.Held || info.Token != lease.Token() || info.Metadata != "m" {
		t.Fatalf("Inspect: %+v, %v", info, err)
	}
	if infos, err := c.List(ctx, "insp*"); err != nil || len(infos) != 1 {
		t.Fatalf("List: %+v, %v", infos, err)
	}
	if _, err := c.ForceUnlock(ctx, "inspected"); err != nil {
		t.Fatalf("ForceUnlock: %v", err)
	}
	if err := lease.Extend(ctx, time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Extend after ForceUnlock: %v, want ErrNotHeld", err)
	}

	plain, err := dlock.NewClient(lockOnly{memlock.NewStore()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Inspect(ctx, "k"); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Inspect without an Inspector driver: %v, want errors.ErrUnsupported", err)
	}
	if _, err := plain.List(ctx, "*"); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("List without an Inspector driver: %v, want errors.ErrUnsupported", err)
	}
	if _, err := plain.ForceUnlock(ctx, "k"); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("ForceUnlock without an Inspector driver: %v, want errors.ErrUnsupported", err)
	}
	var nilClient *dlock.Client
	if _, err := nilClient.Inspect(ctx, "k"); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Inspect on a nil Client: %v, want ErrInvalid", err)
	}
}
