package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// resizeKey returns a key for t whose stored size is deleted at its end.
func resizeKey(t *testing.T, rdb redis.UniversalClient) string {
	key := dlocktest.Key(t)
	t.Cleanup(func() { rdb.Del(context.Background(), redislock.SizeKey(key)) })
	return key
}

// holdN takes n permits of key through c, for a minute each.
func holdN(t *testing.T, c *redislock.Client, key string, n int) []*dlock.Lease {
	t.Helper()
	var ls []*dlock.Lease
	for range n {
		l, err := c.TryLock(context.Background(), key, dlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatalf("permit %d of %d: %v", len(ls)+1, n, err)
		}
		ls = append(ls, l)
	}
	return ls
}

func TestSemaphoreResizeConformance(t *testing.T) {
	dlocktest.RunResize(t, dlocktest.ResizeBackend{
		New: func(t testing.TB, n int) *dlock.Client {
			return newSemaphore(t, newRDB(t, srv.Addr), n)
		},
		Adopt:      redislock.StoredSize,
		MaxPermits: redislock.MaxPermits,
	})
}

// TestSemaphoreResizeUpWakesWaiter: raising the size hands the permit it frees
// to the waiter at the head of the queue at once, by a message naming it, and
// the holder keeps its permit.
func TestSemaphoreResizeUpWakesWaiter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	probe := newRDB(t, srv.Addr)
	key := resizeKey(t, probe)
	a := newSemaphore(t, newRDB(t, srv.Addr), 1)
	held := holdN(t, a, key, 1)
	sub := probe.Subscribe(ctx, redislock.WakeChannel(key))
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	b := newSemaphore(t, newRDB(t, srv.Addr), 1) // another process, made with the old size
	got := make(chan error, 1)
	var lease *dlock.Lease
	go func() {
		var err error
		lease, err = b.Lock(ctx, key, dlock.WithWait(20*time.Second))
		got <- err
	}()
	eventually(t, "the waiter queued", func() bool { return probe.LLen(ctx, redislock.QueueKey(key)).Val() == 1 })
	start := time.Now()
	if err := a.Resize(ctx, key, 2); err != nil {
		t.Fatal(err)
	}
	msg, err := sub.ReceiveMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter after the resize: %v", err)
	}
	t.Logf("the waiter had its permit %v after the resize", time.Since(start).Round(time.Millisecond))
	if msg.Payload != lease.Owner() {
		t.Errorf("the resize woke %q, want the waiter %q", msg.Payload, lease.Owner())
	}
	if lease.Token() <= held[0].Token() {
		t.Errorf("token %d after %d: tokens must grow", lease.Token(), held[0].Token())
	}
	if info, err := a.Inspect(ctx, key); err != nil || info.Holders != 2 || info.Limit != 2 {
		t.Errorf("Inspect after the resize: %+v, %v; want 2 of 2", info, err)
	}
	for _, l := range append(held, lease) {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSemaphoreResizeBadInput: a key held as another kind of lock is
// ErrConflict, a Client of another kind is errors.ErrUnsupported, and a
// refused resize stores nothing.
func TestSemaphoreResizeBadInput(t *testing.T) {
	ctx := context.Background()
	rdb := newRDB(t, srv.Addr)
	key := resizeKey(t, rdb)
	c := newSemaphore(t, rdb, 2)
	mutex := newClient(t)
	l, err := mutex.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Resize(ctx, key, 3); !errors.Is(err, dlock.ErrConflict) {
		t.Errorf("Resize of a held mutex: %v", err)
	}
	if err := mutex.Resize(ctx, key, 3); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Resize through a mutex Client: %v", err)
	}
	_ = l.Unlock(ctx)
	for _, n := range []int{0, redislock.MaxPermits + 1} {
		if err := c.Resize(ctx, key, n); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("Resize(%d): %v", n, err)
		}
	}
	if n := rdb.Exists(ctx, redislock.SizeKey(key)).Val(); n != 0 {
		t.Errorf("a refused resize stored a size")
	}
}

// TestSemaphoreResizeCancelledWaiter: a waiter that gave up is not handed the
// permit a raised size frees.
func TestSemaphoreResizeCancelledWaiter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	probe := newRDB(t, srv.Addr)
	key := resizeKey(t, probe)
	c := newSemaphore(t, newRDB(t, srv.Addr), 1)
	held := holdN(t, c, key, 1)
	wctx, wcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := newSemaphore(t, newRDB(t, srv.Addr), 1).Lock(wctx, key)
		done <- err
	}()
	eventually(t, "the waiter queued", func() bool { return probe.LLen(ctx, redislock.QueueKey(key)).Val() == 1 })
	wcancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Lock: %v", err)
	}
	if err := c.Resize(ctx, key, 2); err != nil {
		t.Fatal(err)
	}
	if info, err := c.Inspect(ctx, key); err != nil || info.Holders != 1 || info.Limit != 2 || info.Waiters != 0 {
		t.Errorf("Inspect: %+v, %v; want 1 of 2, nobody waiting", info, err)
	}
	_ = held[0].Unlock(ctx)
}
