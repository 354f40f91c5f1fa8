package dlocktest

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// Superseded takes key with c, ends that holding with ForceUnlock (as an
// operator or an expiry would end it) and takes key again: it returns the
// superseded lease, whose token is now stale (and which a backend that tells
// its holders at once has ended already), and the current one. For tests of
// fences.
func Superseded(t testing.TB, c *dlock.Client, key string, opts ...dlock.Option) (old, cur *dlock.Lease) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	old, err := c.TryLock(ctx, key, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ForceUnlock(ctx, key); err != nil {
		t.Fatal(err)
	}
	if cur, err = c.TryLock(ctx, key, opts...); err != nil {
		t.Fatal(err)
	}
	return old, cur
}
