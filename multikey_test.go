package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/redislock"
	"golang.org/x/sync/errgroup"
)

// Clients taking random overlapping sets of keys: no key is ever held by two
// groups, nobody deadlocks, and nothing is left held.
func TestLockAllUnderContention(t *testing.T) {
	const clients, rounds = 6, 10
	base := dlocktest.Key(t)
	keys := []string{base + ".a", base + ".b", base + ".c", base + ".d", base + ".e"}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var mu sync.Mutex
	held := map[string]bool{}
	mark := func(ks []string, on bool) error {
		mu.Lock()
		defer mu.Unlock()
		for _, k := range ks {
			if on && held[k] {
				return fmt.Errorf("%s taken by two groups", k)
			}
			held[k] = on
		}
		return nil
	}
	g, gctx := errgroup.WithContext(ctx)
	for i := 0; i < clients; i++ {
		c := newRedisLocker(t, dlock.WithRetry(dlock.ExponentialBackoff(time.Millisecond, 20*time.Millisecond)))
		g.Go(func() error {
			for r := 0; r < rounds; r++ {
				want := slices.Clone(keys)
				rand.Shuffle(len(want), func(i, j int) { want[i], want[j] = want[j], want[i] })
				want = want[:1+rand.IntN(3)]
				grp, err := dlock.LockAll(gctx, c, want)
				if err != nil {
					return err
				}
				if err := mark(grp.Keys(), true); err != nil {
					return err
				}
				if err := mark(grp.Keys(), false); err != nil {
					return err
				}
				if err := grp.Unlock(gctx); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	c := newRedisLocker(t)
	for _, k := range keys {
		if info, err := c.Inspect(ctx, k); err != nil || info.Held {
			t.Errorf("%s after the run: %+v %v", k, info, err)
		}
	}
}

func TestLockAllSortsDedupesAndFences(t *testing.T) {
	ctx := context.Background()
	base := dlocktest.Key(t)
	c := newRedisLocker(t)
	grp, err := dlock.LockAll(ctx, c, []string{base + ".b", base + ".a", base + ".b"})
	if err != nil {
		t.Fatal(err)
	}
	if got := grp.Keys(); !slices.Equal(got, []string{base + ".a", base + ".b"}) {
		t.Fatalf("Keys %v", got)
	}
	if grp.Token(base+".a") == 0 || grp.Token(base+".b") == 0 || grp.Token(base+".zz") != 0 || grp.Lease(base+".zz") != nil {
		t.Fatal("tokens")
	}
	if err := grp.Err(); err != nil {
		t.Fatal(err)
	}
	if err := grp.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := grp.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("second Unlock: %v", err)
	}
	if !errors.Is(grp.Err(), dlock.ErrReleased) {
		t.Fatalf("Err after Unlock: %v", grp.Err())
	}
}

// One key held elsewhere: TryLockAll fails with its BusyError and gives back
// the keys it had taken; a LockAll cancelled while waiting for it does too.
func TestLockAllAllOrNothing(t *testing.T) {
	ctx := context.Background()
	base := dlocktest.Key(t)
	a, b, cc := base+".a", base+".b", base+".c"
	holder := newRedisLocker(t)
	l, err := holder.Lock(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	c := newRedisLocker(t)
	var busy *dlock.BusyError
	if _, err := dlock.TryLockAll(ctx, c, []string{cc, b, a}); !errors.As(err, &busy) {
		t.Fatalf("TryLockAll: %v, want a BusyError", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	defer cancel()
	if _, err := dlock.LockAll(wctx, c, []string{cc, b, a}); !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("LockAll: %v, want ErrNotObtained and DeadlineExceeded", err)
	}
	if _, err := dlock.LockAll(ctx, c, []string{cc, b, a}, dlock.WithWait(100*time.Millisecond)); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("LockAll WithWait: %v, want ErrNotObtained", err)
	}
	for _, k := range []string{a, cc} {
		if info, err := holder.Inspect(ctx, k); err != nil || info.Held {
			t.Errorf("%s after the failed attempts: %+v %v", k, info, err)
		}
	}
	unlockLease(t, l)
}

// A member whose holder crashed comes free at its TTL, and LockAll gets the
// whole set then.
func TestLockAllWaitsOutCrashedHolder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	base := dlocktest.Key(t)
	c := newRedisLocker(t)
	if _, err := c.Driver().Acquire(ctx, driver.AcquireRequest{Key: base + ".b", Owner: "crashed", TTL: 300 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	grp, err := dlock.LockAll(ctx, c, []string{base + ".a", base + ".b"})
	if err != nil {
		t.Fatal(err)
	}
	if err := grp.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// Losing one member ends the group: Done, Context and Err report the loss, and
// Unlock releases the others.
func TestLockAllOneLossEndsGroup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	base := dlocktest.Key(t)
	c := newRedisLocker(t)
	grp, err := dlock.LockAll(ctx, c, []string{base + ".a", base + ".b"}, dlock.WithTTL(300*time.Millisecond), dlock.WithAutoRenew(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ForceUnlock(ctx, base+".b"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-grp.Done():
	case <-ctx.Done():
		t.Fatal("group not ended")
	}
	if !errors.Is(grp.Err(), dlock.ErrLockLost) || !errors.Is(context.Cause(grp.Context()), dlock.ErrLockLost) {
		t.Fatalf("Err %v", grp.Err())
	}
	if err := grp.Unlock(ctx); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Unlock: %v, want the loss", err)
	}
	if info, err := c.Inspect(ctx, base+".a"); err != nil || info.Held {
		t.Fatalf("a after Unlock: %+v %v", info, err)
	}
}

func TestLockAllBadInput(t *testing.T) {
	ctx := context.Background()
	c := newRedisLocker(t)
	var nilClient *redislock.Client
	var nilCtx context.Context
	many := make([]string, dlock.MaxGroupKeys+1)
	for i := range many {
		many[i] = fmt.Sprint("k", i)
	}
	cases := map[string]func() error{
		"nil locker":       func() error { _, err := dlock.LockAll(ctx, nil, []string{"a"}); return err },
		"typed nil locker": func() error { _, err := dlock.TryLockAll(ctx, nilClient, []string{"a"}); return err },
		"nil ctx":          func() error { _, err := dlock.LockAll(nilCtx, c, []string{"a"}); return err },
		"no keys":          func() error { _, err := dlock.LockAll(ctx, c, nil); return err },
		"bad key":          func() error { _, err := dlock.TryLockAll(ctx, c, []string{"a", "{b}"}); return err },
		"too many":         func() error { _, err := dlock.LockAll(ctx, c, many); return err },
		"bad option":       func() error { _, err := dlock.LockAll(ctx, c, []string{"a"}, dlock.WithWait(-1)); return err },
		"bad ttl":          func() error { _, err := dlock.LockAll(ctx, c, []string{"a"}, dlock.WithTTL(0)); return err },
	}
	for name, f := range cases {
		if err := f(); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	var g *dlock.Group
	if g.Keys() != nil || g.Token("a") != 0 || !errors.Is(g.Err(), dlock.ErrNotHeld) || !errors.Is(g.Unlock(ctx), dlock.ErrNotHeld) {
		t.Error("nil Group")
	}
	<-g.Done()
	if !strings.Contains(fmt.Sprint(context.Cause(g.Context())), "not held") {
		t.Error("nil Group context")
	}
}

func unlockLease(t *testing.T, l *dlock.Lease) {
	t.Helper()
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
}
