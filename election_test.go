package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/memlock"
	"golang.org/x/sync/errgroup"
)

// Several candidates, each with its own Client, win the role in turn: never two
// at once, each term's token above the last, and CurrentLeader names the one leading.
func TestCampaignOneLeaderAtATime(t *testing.T) {
	const candidates, terms = 4, 6
	role := dlocktest.Key(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var inside atomic.Int32
	var mu sync.Mutex
	var last uint64
	g, gctx := errgroup.WithContext(ctx)
	for i := 0; i < candidates; i++ {
		c := newRedisLocker(t)
		name := fmt.Sprintf("instance-%d", i)
		g.Go(func() error {
			for n := 0; n < terms; n++ {
				lead, err := dlock.Campaign(gctx, c, role, dlock.WithMetadata(name))
				if err != nil {
					return err
				}
				if !inside.CompareAndSwap(0, 1) {
					return errors.New("two leaders at once")
				}
				mu.Lock()
				ok := lead.Token() > last
				last = lead.Token()
				mu.Unlock()
				if !ok {
					return fmt.Errorf("term token %d not above the last", lead.Token())
				}
				info, err := dlock.CurrentLeader(gctx, c, role)
				if err != nil {
					return err
				}
				if !info.Held || info.Metadata != name || info.Owner != lead.Lease().Owner() || info.Token != lead.Token() {
					return fmt.Errorf("CurrentLeader says %+v while %s leads", info, name)
				}
				inside.Store(0)
				if err := lead.Resign(gctx); err != nil {
					return err
				}
				if !errors.Is(lead.Err(), dlock.ErrReleased) {
					return fmt.Errorf("after Resign: %v", lead.Err())
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}

// A leader that dies without resigning keeps the role until its TTL; a waiting
// candidate then wins, and an observer sees the change.
func TestCampaignTakesOverFromCrashedLeader(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	role := dlocktest.Key(t)
	obs := newRedisLocker(t)
	// The crashed leader: a holding that nobody renews or releases.
	const ttl = 400 * time.Millisecond
	if _, err := newRedisLocker(t).Driver().Acquire(ctx, driver.AcquireRequest{Key: role, Owner: "crashed", TTL: ttl, Metadata: "old"}); err != nil {
		t.Fatal(err)
	}
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	changes, err := dlock.WatchLeader(octx, obs, role, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if first := <-changes; !first.Held || first.Metadata != "old" {
		t.Fatalf("first observation %+v", first)
	}
	start := time.Now()
	lead, err := dlock.Campaign(ctx, newRedisLocker(t), role, dlock.WithMetadata("new"))
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > ttl+time.Second {
		t.Errorf("took over %v after the crash, TTL %v", took, ttl)
	}
	for info := range changes {
		if info.Held && info.Metadata == "new" {
			break
		}
		if info.Held {
			t.Fatalf("observed %+v", info)
		}
	}
	if err := lead.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if info := <-changes; info.Held {
		t.Fatalf("after Resign observed %+v", info)
	}
	ocancel()
	for range changes { // closed once octx ends
	}
}

// A leader whose role is taken away learns it from its renewal.
func TestLeadershipLost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	role := dlocktest.Key(t)
	c := newRedisLocker(t)
	lead, err := dlock.Campaign(ctx, c, role, dlock.WithTTL(300*time.Millisecond), dlock.WithAutoRenew(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ForceUnlock(ctx, role); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lead.Done():
	case <-ctx.Done():
		t.Fatal("leadership not lost")
	}
	if !errors.Is(lead.Err(), dlock.ErrLockLost) || !errors.Is(context.Cause(lead.Context()), dlock.ErrLockLost) {
		t.Fatalf("Err %v", lead.Err())
	}
	if err := lead.Resign(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Resign after loss: %v", err)
	}
}

// A campaign cancelled while it waits leaves nothing: once the leader resigns,
// the role is free.
func TestCampaignCancelledLeavesNothing(t *testing.T) {
	ctx := context.Background()
	role := dlocktest.Key(t)
	c := newRedisLocker(t)
	lead, err := dlock.Campaign(ctx, c, role)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := dlock.Campaign(wctx, newRedisLocker(t), role); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cancelled campaign: %v", err)
	}
	if err := lead.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if info, err := dlock.CurrentLeader(ctx, c, role); err != nil || info.Held {
		t.Fatalf("after Resign: %+v %v", info, err)
	}
}

func TestElectionBadInput(t *testing.T) {
	ctx := context.Background()
	c := newRedisLocker(t)
	var nilLocker *dlock.Client
	var nilCtx context.Context
	checks := map[string]error{}
	_, checks["nil locker"] = dlock.Campaign(ctx, nil, "r")
	_, checks["typed nil locker"] = dlock.Campaign(ctx, nilLocker, "r")
	_, checks["nil ctx"] = dlock.Campaign(nilCtx, c, "r")
	_, checks["bad role"] = dlock.Campaign(ctx, c, "{r}")
	_, checks["bad option"] = dlock.Campaign(ctx, c, "r", dlock.WithTTL(-1))
	_, checks["Leader nil inspector"] = dlock.CurrentLeader(ctx, nil, "r")
	_, checks["Leader bad role"] = dlock.CurrentLeader(ctx, c, "")
	_, checks["WatchLeader interval 0"] = dlock.WatchLeader(ctx, c, "r", 0)
	_, checks["WatchLeader interval too long"] = dlock.WatchLeader(ctx, c, "r", time.Hour)
	_, checks["WatchLeader bad role"] = dlock.WatchLeader(ctx, c, "\n", time.Second)
	for name, err := range checks {
		if !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	var l *dlock.Leadership
	if l.Token() != 0 || l.Role() != "" || !errors.Is(l.Err(), dlock.ErrNotHeld) || !errors.Is(l.Resign(ctx), dlock.ErrNotHeld) {
		t.Error("nil Leadership")
	}
	<-l.Done()
}

// A leadership with an explicit TTL is renewed like one with the default: a
// short TTL means a fast take-over after the leader dies, not a leadership
// that ends every TTL. WithAutoRenew(false) still makes a fixed term.
func TestCampaignWithTTLRenews(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const ttl = time.Second // renewed every third of it: room for a loaded machine
	role := dlocktest.Key(t)
	c := newRedisLocker(t)
	lead, err := dlock.Campaign(ctx, c, role, dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-lead.Done():
		t.Fatalf("leadership with TTL %v lost: %v", ttl, lead.Err())
	case <-time.After(3 * ttl): // the time that passes is what is tested
	}
	info, err := dlock.CurrentLeader(ctx, c, role)
	if err != nil || !info.Held || info.Token != lead.Token() {
		t.Fatalf("after %v the leader is %+v (%v), want this term (token %d)", 3*ttl, info, err, lead.Token())
	}
	if err := lead.Resign(ctx); err != nil {
		t.Fatal(err)
	}

	// Explicitly fixed, in the call or as the Client's default: the term ends at
	// its TTL and says why.
	fixed := newRedisLocker(t, dlock.WithTTL(ttl), dlock.WithAutoRenew(false))
	for _, cand := range []struct {
		l    dlock.Locker
		opts []dlock.Option
	}{{c, []dlock.Option{dlock.WithTTL(ttl), dlock.WithAutoRenew(false)}}, {fixed, nil}} {
		lead, err := dlock.Campaign(ctx, cand.l, role, cand.opts...)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-lead.Done():
		case <-ctx.Done():
			t.Fatal("fixed term did not end")
		}
		if err := lead.Err(); !errors.Is(err, dlock.ErrLockLost) || !strings.Contains(err.Error(), "fixed lease's TTL of "+ttl.String()+" ran out") {
			t.Fatalf("fixed term ended with %v", err)
		}
	}
}

// endedWatch is an Inspector whose KeyWatcher's watch ends at once, as a
// watch does when its store's session expires.
type endedWatch struct{ driver.Inspector }

func (endedWatch) WatchKey(context.Context, string) (<-chan struct{}, error) {
	ch := make(chan struct{})
	close(ch)
	return ch, nil
}

// TestObserveFallsBackToPollingWhenTheWatchEnds: a watch that ends leaves
// WatchLeader polling, each change reported once.
func TestObserveFallsBackToPollingWhenTheWatchEnds(t *testing.T) {
	c, err := memlock.New(memlock.NewStore())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ch, err := dlock.WatchLeader(ctx, endedWatch{c}, "role", 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if first := <-ch; first.Held {
		t.Fatalf("first report %+v, want free", first)
	}
	l, err := c.TryLock(ctx, "role", dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if got := <-ch; !got.Held || got.Token != l.Token() {
		t.Fatalf("after TryLock: %+v", got)
	}
	select {
	case again := <-ch:
		t.Fatalf("a second report without a change: %+v", again)
	case <-time.After(100 * time.Millisecond): // ten polls
	}
	cancel()
	for range ch {
	}
}
