package pglock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"golang.org/x/sync/errgroup"
)

func newSemaphore(t testing.TB, n int, opts ...dlock.Option) (*Client, *SemaphoreDriver) {
	t.Helper()
	s, err := NewSemaphoreDriver(newPool(t), n)
	if err != nil {
		t.Fatal(err)
	}
	c, err := dlock.NewClient(s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c, s
}

func TestSemaphoreOfOneConformance(t *testing.T) {
	dlocktest.Run(t, dlocktest.Backend{
		Info: driver.DriverInfo{Backend: "pglock", Kind: driver.KindSemaphore},
		New: func(t testing.TB, opts ...dlock.Option) dlock.Locker {
			c, _ := newSemaphore(t, 1, opts...)
			return c
		},
		Skip: map[string]string{
			"ForeignDataIsConflict": "a table row is always a lock; a table of another shape is ErrConflict (TestForeignTableIsConflict)",
		},
	})
}

// Clients of several processes (pools of their own) never hold more than n
// permits at once, and never get a token twice.
func TestSemaphoreNeverMoreThanN(t *testing.T) {
	const n, clients, goroutines, rounds = 3, 3, 4, 8
	key := dlocktest.Key(t)
	ctx := ctxT(t, 120*time.Second)
	var inside, most atomic.Int32
	var mu sync.Mutex
	seen := map[uint64]bool{}
	g, gctx := errgroup.WithContext(ctx)
	for c := 0; c < clients; c++ {
		l, _ := newSemaphore(t, n, dlock.WithRetry(dlock.ExponentialBackoff(time.Millisecond, 20*time.Millisecond)))
		for i := 0; i < goroutines; i++ {
			g.Go(func() error {
				for r := 0; r < rounds; r++ {
					lease, err := l.Lock(gctx, key, dlock.WithWait(time.Minute))
					if err != nil {
						return err
					}
					mu.Lock()
					if seen[lease.Token()] {
						mu.Unlock()
						return errors.New("a token handed out twice")
					}
					seen[lease.Token()] = true
					mu.Unlock()
					in := inside.Add(1)
					if in > n {
						return errors.New("more than n holders")
					}
					for m := most.Load(); in > m && !most.CompareAndSwap(m, in); m = most.Load() {
					}
					time.Sleep(2 * time.Millisecond) // work under the permit
					inside.Add(-1)
					if err := lease.Unlock(gctx); err != nil {
						return err
					}
				}
				return nil
			})
		}
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	// How many held at once depends on the scheduling; TestSemaphoreLimitMismatchAndInspect
	// checks that n permits can be held together.
	t.Logf("%d clients of %d goroutines, %d permits: at most %d holders at once", clients, goroutines, n, most.Load())
}

func TestSemaphoreLimitMismatchAndInspect(t *testing.T) {
	key := dlocktest.Key(t)
	ctx := ctxT(t, 20*time.Second)
	two, s := newSemaphore(t, 2)
	a, err := two.TryLock(ctx, key, dlock.WithMetadata("a"), dlock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	b, err := two.TryLock(ctx, key, dlock.WithMetadata("b"), dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var busy *dlock.BusyError
	if _, err := two.TryLock(ctx, key); !errors.As(err, &busy) || busy.Remaining <= 0 || busy.Remaining > 5*time.Second {
		t.Fatalf("third permit of two: %v, want busy for the first permit's time", err)
	}
	three, _ := newSemaphore(t, 3)
	if _, err := three.TryLock(ctx, key); !errors.Is(err, dlock.ErrConflict) {
		t.Fatalf("a semaphore of 3 over one of 2: %v, want ErrConflict", err)
	}
	info, err := s.Inspect(ctx, key)
	if err != nil || !info.Held || info.Kind != driver.KindSemaphore || info.Holders != 2 || info.Limit != 2 || info.Owner != b.Owner() || info.Token != b.Token() || info.Metadata != "b" {
		t.Fatalf("Inspect: %+v, %v; want 2 of 2, the last ending b", info, err)
	}
	infos, err := driver.List(ctx, s, key[:len(key)-3]+"*")
	if err != nil || len(infos) != 1 || infos[0].Holders != 2 {
		t.Fatalf("List: %+v, %v", infos, err)
	}
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if info, err := s.ForceUnlock(ctx, key); err != nil || info.Holders != 1 || info.Limit != 2 || info.Kind != driver.KindSemaphore || info.Owner != b.Owner() || info.Token != b.Token() {
		t.Fatalf("ForceUnlock: %+v, %v; want b's permit", info, err)
	}
	if info, err := s.ForceUnlock(ctx, key); !errors.Is(err, dlock.ErrNotHeld) || info.Held {
		t.Fatalf("ForceUnlock of a free semaphore: %+v, %v; want ErrNotHeld", info, err)
	}
	if err := b.Extend(ctx, time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Extend after ForceUnlock: %v", err)
	}
	// Free again: another n is fine now.
	l, err := three.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("a semaphore of 3 once the key is free: %v", err)
	}
	if l.Token() <= b.Token() {
		t.Fatalf("token %d not above %d", l.Token(), b.Token())
	}
	_ = l.Unlock(ctx)
	if _, err := NewSemaphoreDriver(newPool(t), 0); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("NewSemaphoreDriver(0): %v", err)
	}
	if _, err := NewSemaphore(nil, 2); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("NewSemaphore(nil): %v", err)
	}
}

func TestSemaphoreAbandonedAcquisitionCannotLand(t *testing.T) {
	key := dlocktest.Key(t)
	ctx := ctxT(t, 30*time.Second)
	_, s := newSemaphore(t, 2)
	for i := 0; i < 20; i++ {
		owner := "racer-" + string(rune('a'+i))
		h := driver.Holding{Key: key, Owner: owner, TTL: time.Minute}
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, _ = s.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: owner, TTL: time.Minute})
		}()
		go func() { defer wg.Done(); _ = s.Abandon(ctx, h) }()
		wg.Wait()
		if _, err := s.TTL(ctx, h); !errors.Is(err, dlock.ErrNotHeld) {
			t.Fatalf("round %d: the abandoned owner holds a permit (%v)", i, err)
		}
		if _, err := s.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: owner, TTL: time.Minute}); !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("round %d: Acquire after Abandon: %v", i, err)
		}
	}
	if info, err := s.Inspect(ctx, key); err != nil || info.Held {
		t.Fatalf("permits left: %+v, %v", info, err)
	}
}

// A released permit wakes a waiter of another process at once.
func TestSemaphoreReleaseWakesAWaiter(t *testing.T) {
	key := dlocktest.Key(t)
	ctx := ctxT(t, 30*time.Second)
	holder, _ := newSemaphore(t, 1)
	l, err := holder.TryLock(ctx, key, dlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	w, s := newSemaphore(t, 1)
	got := make(chan *dlock.Lease, 1)
	go func() {
		l, err := w.Lock(context.Background(), key, dlock.WithWait(20*time.Second))
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		got <- l
	}()
	subscribed(t, s.d, 1)
	start := time.Now()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case next := <-got:
		if next == nil || time.Since(start) > 5*time.Second {
			t.Fatalf("waiter: %v after %v", next, time.Since(start))
		}
		_ = next.Unlock(ctx)
	case <-time.After(15 * time.Second):
		t.Fatal("waiter not woken by the release of a 30s permit")
	}
}
