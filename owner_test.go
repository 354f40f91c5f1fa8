package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/memlock"
)

func TestSplitOwner(t *testing.T) {
	for _, c := range []struct{ owner, id, acq string }{
		{"0123abcd", "0123abcd", "0123abcd"},
		{"deploy-42#0123abcd", "deploy-42", "0123abcd"},
		{"host.example:81#ff", "host.example:81", "ff"},
	} {
		if id, acq := driver.SplitOwner(c.owner); id != c.id || acq != c.acq {
			t.Errorf("SplitOwner(%q) = %q, %q; want %q, %q", c.owner, id, acq, c.id, c.acq)
		}
	}
}

// A lock that is not reentrant ignores the owner ID: every acquisition is its
// own owner, and the second is refused.
func TestWithOwnerOnPlainLock(t *testing.T) {
	ctx := context.Background()
	c, err := memlock.New(memlock.NewStore(), dlock.WithOwner("worker-1"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.TryLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if id, acq := driver.SplitOwner(l.Owner()); id != "worker-1" || len(acq) != 32 {
		t.Errorf("owner %q", l.Owner())
	}
	if _, err := c.TryLock(ctx, "k"); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("second TryLock: %v, want ErrNotObtained", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := memlock.New(memlock.NewStore(), dlock.WithOwner(strings.Repeat("x", driver.MaxOwnerLen))); err != nil {
		t.Errorf("longest owner ID refused: %v", err)
	}
}
