package legacy_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/legacy"
)

// TestTokenAboveGrantLostInACrash: a legacy lock granted after the last save
// and lost in a crash does not hand its token out again.
func TestTokenAboveGrantLostInACrash(t *testing.T) {
	server := testserver.StartRedis(t, "--save", "3600 1")
	c, err := legacy.New(testserver.RedisClient(t, server.Addr), legacy.Format{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	key := dlocktest.Key(t)
	take := func() *dlock.Lease {
		l, err := c.TryLock(ctx, key, dlock.WithTTL(20*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	if err := take().Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := testserver.RedisClient(t, server.Addr).Save(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	a := take()
	if err := server.Restart(); err != nil { // SIGKILL: the grant is lost
		t.Fatal(err)
	}
	b := take()
	_ = a.Unlock(ctx)
	if err := b.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if b.Token() <= a.Token() {
		t.Fatalf("token %d after the crash, not above the lost grant's %d", b.Token(), a.Token())
	}
}
