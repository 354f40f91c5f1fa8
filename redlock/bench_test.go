package redlock_test

import (
	"context"
	"testing"

	"github.com/dlock-go/dlock/dlocktest"
)

// BenchmarkLockUnlock is one uncontended lock and unlock cycle over the five
// masters (all on this host).
func BenchmarkLockUnlock(b *testing.B) {
	c := newClient(b)
	ctx := context.Background()
	key := dlocktest.Key(b)
	for b.Loop() {
		l, err := c.Lock(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
