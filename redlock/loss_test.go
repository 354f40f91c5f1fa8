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
	"github.com/dlock-go/dlock/internal/testproxy"
	"github.com/dlock-go/dlock/redislock"
)

// lossSubscribed waits until every master (or those of idx) has a loss
// subscription.
func lossSubscribed(t testing.TB, ctx context.Context, idx ...int) {
	t.Helper()
	if len(idx) == 0 {
		for i := range srvs {
			idx = append(idx, i)
		}
	}
	for _, i := range idx {
		s := srvs[i]
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
	// hold it.
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

// TestLateGrantCountsTowardTheQuorum: a master whose attempt was on its way
// when the majority granted counts as holding until it answers: one master of
// the first majority going does not lose a lock that four masters hold, and a
// late master that refuses is counted off.
func TestLateGrantCountsTowardTheQuorum(t *testing.T) {
	const delay = time.Second
	for _, refuse := range []bool{false, true} {
		t.Run(fmt.Sprintf("refuse=%v", refuse), func(t *testing.T) {
			ctx := ctxT(t, 30*time.Second)
			key := dlocktest.Key(t)
			c, slow := proxiedClient(t, ctx, key, 3*time.Second, 1, 2)
			for _, p := range slow {
				p.SetLatency(testproxy.Upstream, delay)
			}
			l, err := c.TryLock(ctx, key, dlock.WithTTL(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if got := held(t, key, 1, 2); len(got) != 0 {
				t.Fatalf("nodes %v granted within the majority's time; the test needs them late", got)
			}
			if refuse {
				// Another owner takes the lock on the late masters before the
				// delayed attempts arrive.
				for _, i := range []int{1, 2} {
					other, err := redislock.New(newRDB(t, srvs[i].Addr))
					if err != nil {
						t.Fatal(err)
					}
					if _, err := other.TryLock(ctx, key, dlock.WithTTL(10*time.Second)); err != nil {
						t.Fatal(err)
					}
				}
			}
			// Master 0 loses it, and says so.
			lossSubscribed(t, ctx, 0)
			admin := newRDB(t, srvs[0].Addr)
			if err := admin.Del(ctx, redislock.LockKey(key)).Err(); err != nil {
				t.Fatal(err)
			}
			if err := admin.Publish(ctx, "dlock:lost", key).Err(); err != nil {
				t.Fatal(err)
			}
			if refuse {
				// 0, 1 and 2 gone: 3 and 4 are fewer than the quorum.
				select {
				case <-l.Done():
				case <-time.After(delay + 3*time.Second):
					t.Fatal("a lease held by 2 of 5 masters was not lost")
				}
				if err := l.Err(); !strings.Contains(fmt.Sprint(err), "fewer than the quorum") {
					t.Errorf("loss %v, want one naming the quorum", err)
				}
				return
			}
			// The late grants land; the lease, held by 1 to 4, stays.
			for i := 0; len(held(t, key, 1, 2)) < 2; i++ {
				if i == 200 {
					t.Fatal("the late masters never granted")
				}
				time.Sleep(10 * time.Millisecond)
			}
			if err := l.Extend(ctx, 10*time.Second); err != nil {
				t.Fatalf("Extend with 4 of 5 masters holding: %v", err)
			}
			if err := l.Err(); err != nil {
				t.Fatalf("lease held by 4 of 5 masters lost: %v", err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
