package dlocktest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// ResizeBackend describes a backend whose semaphores can be resized at run
// time (driver.Resizer), for RunResize.
type ResizeBackend struct {
	// New returns a semaphore Client of n permits (or of Adopt) with its own
	// connection(s) to the server under test, closed by t.Cleanup. It is
	// called several times per test to stand for separate processes.
	New func(t testing.TB, n int) *dlock.Client

	// Adopt is the n of a Client that adopts the stored size
	// (redislock.StoredSize, pglock.StoredSize).
	Adopt int

	// MaxPermits is the largest size the backend accepts.
	MaxPermits int
}

// RunResize runs the suite of resizable semaphores as subtests of t: a
// lowered size lets holders above it go on but grants nothing until they are
// fewer than it, and stays once the key is free; a raised size admits a
// waiter; Clients made with the size before the first resize or with the size
// in force go on, others are refused (dlock.ErrConflict) but those that adopt
// the stored size; bad input is typed.
func RunResize(t *testing.T, b ResizeBackend) {
	if b.New == nil {
		t.Fatal("dlocktest: ResizeBackend.New is nil")
	}
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, ResizeBackend)
	}{
		{"LoweredSizeWaitsForHoldersToLeave", testResizeDown},
		{"RaisedSizeAdmitsAWaiter", testResizeUp},
		{"WhichClientsGoOn", testResizeClients},
		{"FreeKeyResizedByAnAdopter", testResizeByAdopter},
		{"BadInput", testResizeBadInput},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, b) })
	}
}

// holdPermits takes n permits of key through c, for ttl each.
func holdPermits(t testing.TB, c *dlock.Client, key string, n int, ttl time.Duration) []*dlock.Lease {
	t.Helper()
	var ls []*dlock.Lease
	for range n {
		ls = append(ls, mustLock(t, c, key, dlock.WithTTL(ttl)))
	}
	return ls
}

// busy fails t unless c's TryLock of key is refused as held.
func busy(t testing.TB, c *dlock.Client, key, what string) {
	t.Helper()
	if l, err := c.TryLock(ctxT(t, 10*time.Second), key); !errors.Is(err, dlock.ErrNotObtained) {
		if err == nil {
			unlock(t, l)
		}
		t.Fatalf("%s: %v, want busy", what, err)
	}
}

func unlockAll(t testing.TB, ls []*dlock.Lease) {
	for _, l := range ls {
		unlock(t, l)
	}
}

func testResizeDown(t *testing.T, b ResizeBackend) {
	ctx := ctxT(t, 30*time.Second)
	key := Key(t)
	c, other := b.New(t, 3), b.New(t, 3)
	held := holdPermits(t, c, key, 3, time.Minute)
	if err := other.Resize(ctx, key, 1); err != nil {
		t.Fatal(err)
	}
	last := held[2].Token()
	for len(held) > 0 {
		for i, l := range held {
			if _, err := l.TTL(ctx); err != nil {
				t.Fatalf("holder %d of %d above the lowered size: %v", i+1, len(held), err)
			}
		}
		busy(t, other, key, "TryLock with holders as many as the lowered size or more")
		if info, err := c.Inspect(ctx, key); err == nil && (info.Holders != len(held) || info.Limit != 1) {
			t.Fatalf("Inspect: %d of %d, want %d of 1", info.Holders, info.Limit, len(held))
		}
		unlock(t, held[0])
		held = held[1:]
	}
	l := mustLock(t, other, key)
	if l.Token() <= last {
		t.Errorf("token %d after %d: tokens must grow across resizes", l.Token(), last)
	}
	busy(t, c, key, "a second permit of a semaphore resized to 1")
	unlock(t, l)
	// The size stays once the key is free.
	held = holdPermits(t, c, key, 1, time.Minute)
	busy(t, c, key, "a second permit once the resized key was free")
	unlockAll(t, held)
}

func testResizeUp(t *testing.T, b ResizeBackend) {
	ctx := ctxT(t, 30*time.Second)
	key := Key(t)
	a := b.New(t, 1)
	held := holdPermits(t, a, key, 1, 30*time.Second)
	got := make(chan *dlock.Lease, 1)
	w := b.New(t, 1)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		l, err := w.Lock(wctx, key, dlock.WithWait(25*time.Second))
		if err != nil {
			t.Errorf("the waiter: %v", err)
		}
		got <- l
	}()
	if err := a.Resize(ctx, key, 2); err != nil {
		t.Fatal(err)
	}
	var l *dlock.Lease
	select {
	case l = <-got:
	case <-time.After(10 * time.Second):
		cancel()
		<-got
		t.Fatal("no permit for the waiter 10 s after a raised size, with the holder's 30 s lease held")
	}
	if l == nil {
		t.FailNow()
	}
	if l.Token() <= held[0].Token() {
		t.Errorf("token %d after %d", l.Token(), held[0].Token())
	}
	if _, err := held[0].TTL(ctx); err != nil {
		t.Errorf("the holder after the resize: %v", err)
	}
	if info, err := a.Inspect(ctx, key); err == nil && (info.Holders != 2 || info.Limit != 2) {
		t.Errorf("Inspect: %d of %d, want 2 of 2", info.Holders, info.Limit)
	}
	unlockAll(t, append(held, l))
}

func testResizeClients(t *testing.T, b ResizeBackend) {
	ctx := ctxT(t, 30*time.Second)
	key := Key(t)
	adopt := b.New(t, b.Adopt)
	if _, err := adopt.TryLock(ctx, key); !errors.Is(err, dlock.ErrConflict) {
		t.Fatalf("a Client that adopts, with no size to adopt: %v, want ErrConflict", err)
	}
	two := b.New(t, 2)
	held := holdPermits(t, two, key, 1, time.Minute)
	if err := two.Resize(ctx, key, 4); err != nil {
		t.Fatal(err)
	}
	if err := two.Resize(ctx, key, 3); err != nil {
		t.Fatal(err)
	}
	held = append(held, holdPermits(t, two, key, 1, time.Minute)...)         // the size before the first resize
	held = append(held, holdPermits(t, b.New(t, 3), key, 1, time.Minute)...) // the size in force
	if _, err := b.New(t, 4).TryLock(ctx, key); !errors.Is(err, dlock.ErrConflict) {
		t.Errorf("a Client of an earlier resize's size: %v, want ErrConflict", err)
	}
	busy(t, adopt, key, "a Client that adopts, with 3 of 3 held")
	unlock(t, held[0])
	held = append(held[1:], holdPermits(t, adopt, key, 1, time.Minute)...)
	unlockAll(t, held)
	// A Client that adopts takes the holders' size of a key never resized.
	plain := Key(t)
	held = holdPermits(t, two, plain, 2, time.Minute)
	busy(t, adopt, plain, "a Client that adopts, with 2 of 2 held")
	unlockAll(t, held)
}

func testResizeByAdopter(t *testing.T, b ResizeBackend) {
	ctx := ctxT(t, 30*time.Second)
	key := Key(t)
	if err := b.New(t, b.Adopt).Resize(ctx, key, 1); err != nil {
		t.Fatal(err)
	}
	two := b.New(t, 2) // the first Client with a size sets the size before the resize
	held := holdPermits(t, two, key, 1, time.Minute)
	busy(t, two, key, "a second permit of a semaphore resized to 1")
	if _, err := b.New(t, 3).TryLock(ctx, key); !errors.Is(err, dlock.ErrConflict) {
		t.Errorf("a Client of a third size: %v, want ErrConflict", err)
	}
	unlockAll(t, held)
}

func testResizeBadInput(t *testing.T, b ResizeBackend) {
	ctx := ctxT(t, 30*time.Second)
	key := Key(t)
	c := b.New(t, 2)
	for _, n := range []int{0, -1, b.MaxPermits + 1} {
		if err := c.Resize(ctx, key, n); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("Resize(%d): %v, want ErrInvalid", n, err)
		}
	}
	if err := c.Resize(ctx, "", 2); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Resize of an empty key: %v, want ErrInvalid", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := c.Resize(cctx, key, 3); !errors.Is(err, context.Canceled) {
		t.Errorf("Resize with a cancelled context: %v", err)
	}
	held := holdPermits(t, c, key, 2, time.Minute)
	busy(t, c, key, "a third permit after refused resizes")
	unlockAll(t, held)
}
