package dlock_test

import (
	"context"
	"errors"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/memlock"
)

// TestResizeBadInput: Resize checks its arguments before the backend, and a
// backend without resizable semaphores is errors.ErrUnsupported.
func TestResizeBadInput(t *testing.T) {
	ctx := context.Background()
	c, err := memlock.New(memlock.NewStore())
	if err != nil {
		t.Fatal(err)
	}
	var nilClient *dlock.Client
	//lint:ignore SA1012 a nil context is the bad input under test
	if err := c.Resize(nil, "k", 2); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Resize with a nil context: %v", err)
	}
	for _, tc := range []struct {
		c   *dlock.Client
		key string
		n   int
	}{{nilClient, "k", 2}, {c, "", 2}, {c, "k", 0}, {c, "k", -3}} {
		if err := tc.c.Resize(ctx, tc.key, tc.n); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("Resize(%q, %d) on %v: %v, want ErrInvalid", tc.key, tc.n, tc.c, err)
		}
	}
	if err := c.Resize(ctx, "k", 2); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Resize on memlock: %v, want errors.ErrUnsupported", err)
	}
}
