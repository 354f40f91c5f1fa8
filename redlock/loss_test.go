package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/redislock"
)

// lossSubscribed waits until every master has a loss subscription.
func lossSubscribed(t testing.TB, ctx context.Context) {
	t.Helper()
	for _, s := range srvs {
		admin := newRDB(t, s.Addr)
		for i := 0; ; i++ {
			if n, _ := admin.PubSubNumSub(ctx, "dlock:lost").Result(); n["dlock:lost"] >= 1 {
				break
			}
			if i == 400 {
				t.Fatalf("no loss subscription on %s", s.Addr)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// TestForceUnlockTellsHolderAtOnce: a force-unlock on every master loses the
// lease at once, and so do force-unlocks master by master, as soon as the
// masters still holding it fall below the quorum.
func TestForceUnlockTellsHolderAtOnce(t *testing.T) {
	c := newClient(t)
	took := dlocktest.PushedLoss(t, c, dlocktest.Key(t), 2*time.Second, func(ctx context.Context, l *dlock.Lease) (time.Time, error) {
		lossSubscribed(t, ctx)
		start := time.Now()
		_, err := c.ForceUnlock(ctx, l.Key())
		return start, err
	})
	t.Logf("ForceUnlock to Done: %v", took)

	ctx := ctxT(t, 30*time.Second)
	key := dlocktest.Key(t) + "-quorum"
	l, err := c.TryLock(ctx, key, dlock.WithTTL(dlocktest.PushedTTL))
	if err != nil {
		t.Fatal(err)
	}
	lossSubscribed(t, ctx)
	all := make([]int, len(srvs))
	for i := range all {
		all[i] = i
	}
	holding := held(t, key, all...)
	force := func(idx []int) {
		t.Helper()
		for _, i := range idx {
			in, err := redislock.NewInspector(newRDB(t, srvs[i].Addr))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := in.ForceUnlock(ctx, key); err != nil && !errors.Is(err, dlock.ErrNotHeld) {
				t.Fatal(err) // ErrNotHeld: the lost lease released it
			}
		}
	}
	// Forced master by master: the lease is lost once fewer than a quorum
	// hold it (or sooner, while a master's late grant is not counted yet).
	start := time.Now()
	force(holding)
	select {
	case <-l.Done():
		t.Logf("below the quorum to Done: %v", time.Since(start))
	case <-time.After(2 * time.Second):
		t.Fatal("the lease outlived its quorum by 2 s")
	}
	if err := l.Err(); !strings.Contains(fmt.Sprint(err), "fewer than the quorum") {
		t.Errorf("loss %v, want one naming the quorum", err)
	}
	_ = l.Unlock(ctx)
}
