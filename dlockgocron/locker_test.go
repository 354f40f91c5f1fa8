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

const (
	tickInterval = 800 * time.Millisecond
	minHold      = 400 * time.Millisecond // longer than the splay, shorter than interval - splay
	checkedTicks = 4
)

// Two and three schedulers whose clocks differ by up to 80ms, each with its own
// Client: with a min-hold longer than the splay, every tick runs exactly once.
func TestLockerOneRunPerTickWithSplay(t *testing.T) {
	for _, b := range backends {
		for _, n := range []int{2, 3} {
			t.Run(fmt.Sprintf("%s/%d", b.name, n), func(t *testing.T) {
				newLocker := b.new(t)
				g := newTickLog(time.Now().Add(300*time.Millisecond), tickInterval, checkedTicks)
				for i := range n {
					l, err := dlockgocron.NewLocker(newLocker(t), dlockgocron.WithMinHold(minHold),
						dlockgocron.WithKeyPrefix(t.Name()+":"))
					if err != nil {
						t.Fatal(err)
					}
					closeLocker(t, l)
					startScheduler(t, g, i, time.Duration(i)*splayStep, gocron.WithDistributedLocker(l))
				}
				g.wait(t)
				g.checkOnePerTick(t)
			})
		}
	}
}

// The case the min-hold exists for: without it, a fast job is released before
// the schedulers whose clocks run behind fire, and they run the tick again.
func TestLockerWithoutMinHoldSplayedSchedulersRunTwice(t *testing.T) {
	newLocker := backends[0].new(t)
	g := newTickLog(time.Now().Add(300*time.Millisecond), tickInterval, checkedTicks)
	for i := range 3 {
		l, err := dlockgocron.NewLocker(newLocker(t))
		if err != nil {
			t.Fatal(err)
		}
		closeLocker(t, l)
		startScheduler(t, g, i, time.Duration(i)*2*splayStep, gocron.WithDistributedLocker(l))
	}
	g.wait(t)
	total := 0
	for _, n := range g.runsOf() {
		total += n
	}
	t.Logf("runs by tick without min-hold: %v", g.runsOf())
	if total <= checkedTicks {
		t.Errorf("%d runs in %d ticks without min-hold: the splayed schedulers were expected to run ticks again", total, checkedTicks)
	}
}

// A job's lease is renewed while the job runs longer than its TTL, so no other
// instance takes it meanwhile, and released when the job returns.
func TestLockerRenewsWhileJobRuns(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			newLocker := b.new(t)
			ttl := dlockgocron.WithLockOptions(dlock.WithTTL(300*time.Millisecond), dlock.WithAutoRenew(true))
			a, err := dlockgocron.NewLocker(newLocker(t), ttl)
			if err != nil {
				t.Fatal(err)
			}
			other, err := dlockgocron.NewLocker(newLocker(t), ttl)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			lk, err := a.Lock(ctx, t.Name())
			if err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(1200 * time.Millisecond) // four TTLs
			for time.Now().Before(deadline) {
				if _, err := other.Lock(ctx, t.Name()); !errors.Is(err, dlock.ErrNotObtained) {
					t.Fatalf("second instance while the job runs: %v, want ErrNotObtained (first lease: %v)", err, lk.(*dlockgocron.Lock).Lease().Err())
				}
				time.Sleep(50 * time.Millisecond) // pacing of the probes, not synchronisation
			}
			if err := lk.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			lk2, err := other.Lock(ctx, t.Name())
			if err != nil {
				t.Fatalf("after the job ended: %v", err)
			}
			if err := lk2.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// With a min-hold, Unlock returns at once and the lock stays held until the
// min-hold has passed from the start of the run; then it is free.
func TestLockerMinHoldKeepsLockAfterUnlock(t *testing.T) {
	store := memlock.NewStore()
	ca, _ := memlock.New(store)
	cb, _ := memlock.New(store)
	a, err := dlockgocron.NewLocker(ca, dlockgocron.WithMinHold(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	closeLocker(t, a)
	b, _ := dlockgocron.NewLocker(cb)
	ctx := context.Background()
	start := time.Now()
	lk, err := a.Lock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Lock(ctx, "job"); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("within the min-hold: %v, want ErrNotObtained", err)
	}
	if err := lk.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("second Unlock: %v, want ErrNotHeld", err)
	}
	// Wait for the release through the store's state, bounded.
	for i := 0; ; i++ {
		info, err := store.Inspect(ctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		if !info.Held {
			break
		}
		if i > 200 {
			t.Fatal("lock still held 2s after a 300ms min-hold")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if held := time.Since(start); held < 300*time.Millisecond {
		t.Fatalf("released after %v, before the 300ms min-hold", held)
	}
	lk2, err := b.Lock(ctx, "job")
	if err != nil {
		t.Fatalf("after the min-hold: %v", err)
	}
	_ = lk2.Unlock(ctx)
}

// Close waits for the min-holds, and releases them at once when its context
// ends first; later Lock calls fail with ErrClosed.
func TestLockerCloseReleasesMinHolds(t *testing.T) {
	store := memlock.NewStore()
	c, _ := memlock.New(store)
	l, err := dlockgocron.NewLocker(c, dlockgocron.WithMinHold(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lk, err := l.Lock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := l.Close(cctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if info, _ := store.Inspect(ctx, "job"); info.Held {
		t.Fatal("Close left the min-hold lock held")
	}
	if _, err := l.Lock(ctx, "job"); !errors.Is(err, dlockgocron.ErrClosed) {
		t.Fatalf("Lock after Close: %v, want ErrClosed", err)
	}
}

// A job wrapped in Guard runs under a context that ends when its lease is lost,
// with cause ErrLockLost, and its error reports the loss.
func TestLockerGuardStopsJobOnLoss(t *testing.T) {
	store := memlock.NewStore()
	c, _ := memlock.New(store)
	l, err := dlockgocron.NewLocker(c, dlockgocron.WithLockOptions(dlock.WithTTL(100*time.Millisecond), dlock.WithAutoRenew(true)))
	if err != nil {
		t.Fatal(err)
	}
	closeLocker(t, l)
	started := make(chan struct{})
	stopped := make(chan error, 1)
	job := l.Guard("sync", func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		stopped <- context.Cause(ctx)
		return nil
	})
	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(l))
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.NewJob(gocron.OneTimeJob(gocron.OneTimeJobStartImmediately()), gocron.NewTask(job), gocron.WithName("sync"))
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	defer func() { _ = s.Shutdown() }()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("job did not start")
	}
	if l.Lease("sync") == nil {
		t.Fatal("no lease for the running job")
	}
	if _, err := store.ForceUnlock(context.Background(), "sync"); err != nil {
		t.Fatal(err)
	}
	select {
	case cause := <-stopped:
		if !errors.Is(cause, dlock.ErrLockLost) {
			t.Fatalf("job context ended with %v, want ErrLockLost", cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("job not stopped after its lease was lost")
	}
}

func TestLockerInvalid(t *testing.T) {
	if _, err := dlockgocron.NewLocker(nil); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("nil locker: %v", err)
	}
	c, _ := memlock.New(memlock.NewStore())
	if _, err := dlockgocron.NewLocker(c, dlockgocron.WithMinHold(-time.Second)); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("negative min hold: %v", err)
	}
	l, err := dlockgocron.NewLocker(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Lock(context.Background(), "bad{name}"); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("job name with braces: %v", err)
	}
	if _, err := dlockgocron.NewElector(c, ""); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("empty role: %v", err)
	}
	if _, err := dlockgocron.NewElector(nil, "role"); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("nil locker for the elector: %v", err)
	}
}
