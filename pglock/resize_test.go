package pglock

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
)

// holdN takes n permits of key through c, for ttl each.
func holdN(t *testing.T, c *Client, key string, n int, ttl time.Duration) []*dlock.Lease {
	t.Helper()
	var ls []*dlock.Lease
	for range n {
		l, err := c.TryLock(ctxT(t, 10*time.Second), key, dlock.WithTTL(ttl))
		if err != nil {
			t.Fatalf("permit %d of %d: %v", len(ls)+1, n, err)
		}
		ls = append(ls, l)
	}
	return ls
}

// A raised size wakes the waiters of other processes by NOTIFY: the waiter
// has the permit it frees long before the holder's 30 s lease would let a
// polling waiter try again, and the holder keeps its permit.
func TestSemaphoreResizeUpWakesWaiter(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	key := dlocktest.Key(t)
	a, s := newSemaphore(t, 1)
	held := holdN(t, a, key, 1, 30*time.Second)
	ws, err := NewSemaphoreDriver(newPool(t), 1) // another process, made with the old size
	if err != nil {
		t.Fatal(err)
	}
	wd := ws.d
	w, err := dlock.NewClient(ws)
	if err != nil {
		t.Fatal(err)
	}
	got := waitFor(t, w, key)
	subscribed(t, wd, 1)
	start := time.Now()
	if err := a.Resize(ctx, key, 2); err != nil {
		t.Fatal(err)
	}
	var next *dlock.Lease
	select {
	case next = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("waiter not woken 10s after a resize, with a 30s lease held")
	}
	if next == nil {
		t.FailNow()
	}
	t.Logf("the waiter had its permit %v after the resize", time.Since(start).Round(time.Millisecond))
	if _, wakes, _ := wd.ListenerStats(); wakes == 0 {
		t.Errorf("the waiter was not woken by a notification")
	}
	if next.Token() <= held[0].Token() {
		t.Errorf("token %d after %d: tokens must grow", next.Token(), held[0].Token())
	}
	if info, err := s.Inspect(ctx, key); err != nil || info.Holders != 2 || info.Limit != 2 {
		t.Errorf("Inspect: %+v, %v; want 2 of 2", info, err)
	}
	for _, l := range append(held, next) {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSemaphoreResizeConformance(t *testing.T) {
	dlocktest.RunResize(t, dlocktest.ResizeBackend{
		New: func(t testing.TB, n int) *dlock.Client {
			c, _ := newSemaphore(t, n)
			return c
		},
		Adopt:      StoredSize,
		MaxPermits: MaxPermits,
	})
}

// The size of a resized key stays once no permit is held, through a sweep of
// everything expired.
func TestSemaphoreResizeSurvivesSweep(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	key := dlocktest.Key(t)
	c, s := newSemaphore(t, 3)
	held := holdN(t, c, key, 1, time.Minute)
	if err := c.Resize(ctx, key, 1); err != nil {
		t.Fatal(err)
	}
	_ = held[0].Unlock(ctx)
	if _, err := s.d.pool.Exec(ctx, s.q.sweep, 0); err != nil {
		t.Fatal(err)
	}
	held = holdN(t, c, key, 1, time.Minute)
	if _, err := c.TryLock(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("a second permit of a semaphore of 1 after a sweep: %v", err)
	}
	_ = held[0].Unlock(ctx)
}

// Bad sizes are ErrInvalid, and a Client of another kind
// errors.ErrUnsupported.
func TestSemaphoreResizeBadInput(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	for _, n := range []int{0, -2, MaxPermits + 1} {
		if _, err := NewSemaphoreDriver(newPool(t), n); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("Semaphore(%d): %v", n, err)
		}
	}
	if err := newClient(t).Resize(ctx, dlocktest.Key(t), 3); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Resize through a mutex Client: %v", err)
	}
}
