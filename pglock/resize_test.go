package pglock

import (
	"context"
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
	wd := newDriver(t, Config{})
	ws, err := wd.Semaphore(1) // another process, made with the old size
	if err != nil {
		t.Fatal(err)
	}
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

// After a lowered size the holders above it keep their permits, and no
// permit is granted until they number fewer than the new size; the size stays
// once the key is free, and a sweep keeps it.
func TestSemaphoreResizeDown(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	key := dlocktest.Key(t)
	c, s := newSemaphore(t, 3)
	other, _ := newSemaphore(t, 3)
	held := holdN(t, c, key, 3, time.Minute)
	if err := other.Resize(ctx, key, 1); err != nil {
		t.Fatal(err)
	}
	last := held[2].Token()
	for len(held) > 0 {
		if _, err := other.TryLock(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("TryLock with %d holders of a semaphore resized to 1: %v", len(held), err)
		}
		if info, err := s.Inspect(ctx, key); err != nil || info.Holders != len(held) || info.Limit != 1 {
			t.Fatalf("Inspect: %+v, %v; want %d of 1", info, err, len(held))
		}
		if err := held[0].Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		held = held[1:]
	}
	if _, err := s.d.pool.Exec(ctx, s.q.sweep, 0); err != nil { // a sweep of everything expired
		t.Fatal(err)
	}
	l, err := other.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("TryLock once every holder left: %v", err)
	}
	if l.Token() <= last {
		t.Errorf("token %d after %d", l.Token(), last)
	}
	if _, err := c.TryLock(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("a second permit of a semaphore of 1 (after a sweep): %v", err)
	}
	_ = l.Unlock(ctx)
}

// After a resize, Clients made with the size before the first resize or with
// the size in force go on under the size in force; others get ErrConflict,
// but those made with StoredSize, which adopt it.
func TestSemaphoreResizeWhichClients(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	key := dlocktest.Key(t)
	adopt, _ := newSemaphore(t, StoredSize)
	if _, err := adopt.TryLock(ctx, key); !errors.Is(err, dlock.ErrConflict) {
		t.Fatalf("StoredSize with nothing stored: %v", err)
	}
	two, _ := newSemaphore(t, 2)
	held := holdN(t, two, key, 1, time.Minute)
	if err := two.Resize(ctx, key, 4); err != nil {
		t.Fatal(err)
	}
	if err := two.Resize(ctx, key, 3); err != nil {
		t.Fatal(err)
	}
	three, _ := newSemaphore(t, 3)
	held = append(held, holdN(t, two, key, 1, time.Minute)...)
	held = append(held, holdN(t, three, key, 1, time.Minute)...)
	four, _ := newSemaphore(t, 4)
	if _, err := four.TryLock(ctx, key); !errors.Is(err, dlock.ErrConflict) {
		t.Errorf("a Client of an earlier resize's size: %v, want ErrConflict", err)
	}
	if _, err := adopt.TryLock(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
		t.Errorf("StoredSize with 3 of 3 held: %v, want busy", err)
	}
	if err := held[0].Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	held = append(held[1:], holdN(t, adopt, key, 1, time.Minute)...)
	for _, l := range held {
		_ = l.Unlock(ctx)
	}
}

// Bad sizes and keys are ErrInvalid; a cancelled context changes nothing.
func TestSemaphoreResizeBadInput(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	key := dlocktest.Key(t)
	c, _ := newSemaphore(t, 2)
	for _, n := range []int{0, -1, MaxPermits + 1} {
		if err := c.Resize(ctx, key, n); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("Resize(%d): %v", n, err)
		}
	}
	if err := c.Resize(ctx, "", 2); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Resize of an empty key: %v", err)
	}
	for _, n := range []int{0, -2, MaxPermits + 1} {
		if _, err := newDriver(t, Config{}).Semaphore(n); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("Semaphore(%d): %v", n, err)
		}
	}
	mutex := newClient(t, Config{})
	if err := mutex.Resize(ctx, key, 3); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Resize through a mutex Client: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := c.Resize(cctx, key, 3); !errors.Is(err, context.Canceled) {
		t.Errorf("Resize with a cancelled context: %v", err)
	}
	held := holdN(t, c, key, 2, time.Minute)
	if _, err := c.TryLock(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
		t.Errorf("a refused resize changed the size: %v", err)
	}
	for _, l := range held {
		_ = l.Unlock(ctx)
	}
}

// A resize by a Client made with StoredSize of a key nobody holds leaves the
// size before it unknown: the first Client that comes with a size of its own
// sets it, and a Client of a third size is refused.
func TestSemaphoreResizeFreeKeyByAdopter(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	key := dlocktest.Key(t)
	adopt, _ := newSemaphore(t, StoredSize)
	if err := adopt.Resize(ctx, key, 1); err != nil {
		t.Fatal(err)
	}
	two, _ := newSemaphore(t, 2)
	held := holdN(t, two, key, 1, time.Minute)
	if _, err := two.TryLock(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
		t.Errorf("a second permit of a semaphore resized to 1: %v", err)
	}
	three, _ := newSemaphore(t, 3)
	if _, err := three.TryLock(ctx, key); !errors.Is(err, dlock.ErrConflict) {
		t.Errorf("a Client of a third size: %v", err)
	}
	_ = held[0].Unlock(ctx)
}
