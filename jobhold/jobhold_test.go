package jobhold_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/jobhold"
	"github.com/dlock-go/dlock/memlock"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func held(t *testing.T, s *memlock.Store, key string) bool {
	t.Helper()
	info, err := s.Inspect(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return info.Held
}

func TestReleaseAfterMinHold(t *testing.T) {
	store := memlock.NewStore()
	c, _ := memlock.New(store)
	ctx := context.Background()
	var h jobhold.Holds

	lease, err := c.TryLock(ctx, "now")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Release(ctx, "k", lease, time.Now().Add(-time.Second), 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if held(t, store, "now") {
		t.Fatal("a hold past its min-hold was kept")
	}

	start := time.Now()
	lease, err = c.TryLock(ctx, "later")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Release(ctx, "k", lease, start, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if !held(t, store, "later") {
		t.Fatal("released before the min-hold")
	}
	if err := h.Close(ctx); err != nil { // waits for the min-hold
		t.Fatal(err)
	}
	if since := time.Since(start); since < 200*time.Millisecond {
		t.Fatalf("Close returned after %v, before the 200ms min-hold", since)
	}
	if held(t, store, "later") {
		t.Fatal("still held after Close")
	}
	if !errors.Is(lease.Err(), dlock.ErrReleased) {
		t.Fatalf("lease after the min-hold: %v", lease.Err())
	}
}

func TestCloseWithEndedContextReleasesAtOnce(t *testing.T) {
	store := memlock.NewStore()
	c, _ := memlock.New(store)
	var h jobhold.Holds
	lease, err := c.TryLock(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Release(context.Background(), "k", lease, time.Now(), time.Hour); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if held(t, store, "k") {
		t.Fatal("Close with an ended context left the hold")
	}
	// After Close a release is immediate.
	lease, err = c.TryLock(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Release(context.Background(), "k", lease, time.Now(), time.Hour); err != nil {
		t.Fatal(err)
	}
	if held(t, store, "k") {
		t.Fatal("a release after Close was deferred")
	}
}
