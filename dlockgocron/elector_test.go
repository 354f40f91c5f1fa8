package dlockgocron_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockgocron"
	"github.com/dlock-go/dlock/memlock"
	"github.com/go-co-op/gocron/v2"
)

func newElector(t *testing.T, l dlock.Locker, role string, opts ...dlock.Option) *dlockgocron.Elector {
	t.Helper()
	e, err := dlockgocron.NewElector(l, role, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.Close(ctx); err != nil && !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("Close: %v", err)
		}
	})
	return e
}

// waitLeader returns the index of the first of es to lead.
func waitLeader(t *testing.T, es []*dlockgocron.Elector) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	won := make(chan int, len(es))
	for i, e := range es {
		go func() {
			if _, err := e.Wait(ctx); err == nil {
				won <- i
			}
		}()
	}
	select {
	case i := <-won:
		return i
	case <-ctx.Done():
		t.Fatal("no leader within 20s")
		return -1
	}
}

// Two and three schedulers with an Elector each, clocks apart by up to 80ms:
// the leader runs every tick, the others none.
func TestElectorOneRunPerTickWithSplay(t *testing.T) {
	for _, b := range backends {
		for _, n := range []int{2, 3} {
			t.Run(fmt.Sprintf("%s/%d", b.name, n), func(t *testing.T) {
				newLocker := b.new(t)
				var es []*dlockgocron.Elector
				for range n {
					es = append(es, newElector(t, newLocker(t), t.Name(), dlock.WithTTL(time.Second), dlock.WithAutoRenew(true)))
				}
				leader := waitLeader(t, es)
				for i, e := range es {
					if err := e.IsLeader(context.Background()); (err == nil) != (i == leader) {
						t.Fatalf("elector %d IsLeader %v, leader is %d", i, err, leader)
					}
				}
				g := newTickLog(time.Now().Add(300*time.Millisecond), tickInterval, checkedTicks)
				for i, e := range es {
					startScheduler(t, g, i, time.Duration(i)*splayStep, gocron.WithDistributedElector(e))
				}
				g.wait(t)
				g.checkOnePerTick(t)
				for k, who := range g.snapshot() {
					if k < checkedTicks && len(who) == 1 && who[0] != leader {
						t.Errorf("tick %d ran on %d, not on the leader %d", k, who[0], leader)
					}
				}
			})
		}
	}
}

// IsLeader follows the leadership's loss signal: a leadership taken away in
// the store (forced) makes IsLeader fail at the holder's next renewal, and
// another candidate wins.
func TestElectorIsLeaderFollowsLoss(t *testing.T) {
	store := memlock.NewStore()
	var es []*dlockgocron.Elector
	for range 2 {
		c, _ := memlock.New(store)
		es = append(es, newElector(t, c, "role", dlock.WithTTL(150*time.Millisecond), dlock.WithAutoRenew(true)))
	}
	first := waitLeader(t, es)
	ld := es[first].Leadership()
	if ld == nil {
		t.Fatal("Wait returned but Leadership is nil")
	}
	if _, err := store.ForceUnlock(context.Background(), "role"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ld.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("leadership not lost after the role was forced")
	}
	// Not the leader by the lost leadership: the candidate may have won
	// the free role again already, by a new one.
	switch err := es[first].IsLeader(context.Background()); {
	case err == nil && es[first].Leadership() == ld:
		t.Fatal("IsLeader after the loss: leading by the lost leadership")
	case err != nil && !errors.Is(err, dlockgocron.ErrNotLeader):
		t.Fatalf("IsLeader after the loss: %v, want ErrNotLeader", err)
	}
	// Someone leads again (either candidate may win the free role).
	waitLeader(t, es)
	leaders := 0
	for _, e := range es {
		if e.IsLeader(context.Background()) == nil {
			leaders++
		}
	}
	if leaders != 1 {
		t.Fatalf("%d leaders after the re-election", leaders)
	}
}

// Close resigns: another candidate wins at once, not after the TTL.
func TestElectorCloseResigns(t *testing.T) {
	store := memlock.NewStore()
	ca, _ := memlock.New(store)
	cb, _ := memlock.New(store)
	a, err := dlockgocron.NewElector(ca, "role", dlock.WithTTL(time.Hour), dlock.WithAutoRenew(true))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := a.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	b := newElector(t, cb, "role", dlock.WithTTL(time.Hour), dlock.WithAutoRenew(true))
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.IsLeader(ctx); !errors.Is(err, dlockgocron.ErrClosed) {
		t.Fatalf("IsLeader after Close: %v, want ErrClosed", err)
	}
	if _, err := b.Wait(ctx); err != nil {
		t.Fatalf("second candidate after the first resigned: %v", err)
	}
}

// A bad campaign option stops the campaign, and IsLeader reports it.
func TestElectorInvalidOption(t *testing.T) {
	c, _ := memlock.New(memlock.NewStore())
	e := newElector(t, c, "role", dlock.WithTTL(-time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.Wait(ctx); !errors.Is(err, dlock.ErrInvalid) {
		t.Fatalf("Wait: %v, want ErrInvalid", err)
	}
	if err := e.IsLeader(ctx); !errors.Is(err, dlock.ErrInvalid) {
		t.Fatalf("IsLeader: %v, want ErrInvalid", err)
	}
}
