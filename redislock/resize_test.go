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

// TestSemaphoreResizeDown: after a lowered size, the holders above it keep
// their permits, and no permit is granted until they number fewer than the
// new size.
func TestSemaphoreResizeDown(t *testing.T) {
	ctx := context.Background()
	rdb := newRDB(t, srv.Addr)
	key := resizeKey(t, rdb)
	c := newSemaphore(t, rdb, 3)
	other := newSemaphore(t, newRDB(t, srv.Addr), 3)
	held := holdN(t, c, key, 3)
	if err := other.Resize(ctx, key, 1); err != nil {
		t.Fatal(err)
	}
	last := held[2].Token()
	for i, l := range held {
		if _, err := l.TTL(ctx); err != nil {
			t.Errorf("holder %d after the resize: %v", i, err)
		}
	}
	for len(held) > 0 {
		if _, err := other.TryLock(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("TryLock with %d holders of a semaphore resized to 1: %v", len(held), err)
		}
		if info, err := c.Inspect(ctx, key); err != nil || info.Holders != len(held) || info.Limit != 1 {
			t.Fatalf("Inspect: %+v, %v; want %d of 1", info, err, len(held))
		}
		if err := held[0].Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		held = held[1:]
	}
	l, err := other.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("TryLock once every holder left: %v", err)
	}
	if l.Token() <= last {
		t.Errorf("token %d after %d", l.Token(), last)
	}
	if _, err := c.TryLock(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("a second permit of a semaphore of 1: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// The size stays stored once nothing is held.
	held = holdN(t, c, key, 1)
	if _, err := c.TryLock(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("the size was forgotten once the semaphore was free: %v", err)
	}
	_ = held[0].Unlock(ctx)
}

// TestSemaphoreResizeWhichClients: after a resize, Clients made with the size
// before the first resize or with the size in force go on, under the size in
// force; others get ErrLimitMismatch, but those made with StoredSize, which
// adopt it.
func TestSemaphoreResizeWhichClients(t *testing.T) {
	ctx := context.Background()
	rdb := newRDB(t, srv.Addr)
	key := resizeKey(t, rdb)
	adopt := newSemaphore(t, rdb, redislock.StoredSize)
	if _, err := adopt.TryLock(ctx, key); !errors.Is(err, redislock.ErrLimitMismatch) {
		t.Fatalf("StoredSize with nothing stored: %v", err)
	}
	two := newSemaphore(t, rdb, 2)
	held := holdN(t, two, key, 1)
	if err := two.Resize(ctx, key, 4); err != nil {
		t.Fatal(err)
	}
	if err := two.Resize(ctx, key, 3); err != nil {
		t.Fatal(err)
	}
	held = append(held, holdN(t, two, key, 1)...)                     // the initial size
	held = append(held, holdN(t, newSemaphore(t, rdb, 3), key, 1)...) // the size in force
	if _, err := newSemaphore(t, rdb, 4).TryLock(ctx, key); !errors.Is(err, redislock.ErrLimitMismatch) || !errors.Is(err, dlock.ErrConflict) {
		t.Errorf("a Client of an earlier resize's size: %v, want ErrLimitMismatch", err)
	}
	if _, err := adopt.TryLock(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
		t.Errorf("StoredSize with 3 of 3 held: %v, want busy", err)
	}
	if err := held[0].Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	held = append(held[1:], holdN(t, adopt, key, 1)...)
	for _, l := range held {
		_ = l.Unlock(ctx)
	}
	// StoredSize adopts the holders' size of a key never resized.
	plain := dlocktest.Key(t)
	held = holdN(t, two, plain, 2)
	if _, err := adopt.TryLock(ctx, plain); !errors.Is(err, dlock.ErrNotObtained) {
		t.Errorf("StoredSize with 2 of 2 held: %v", err)
	}
	for _, l := range held {
		_ = l.Unlock(ctx)
	}
}

// TestSemaphoreResizeBadInput: bad sizes and keys are ErrInvalid, a key held
// as another kind of lock is ErrConflict, a Client of another kind is
// errors.ErrUnsupported, a cancelled context changes nothing.
func TestSemaphoreResizeBadInput(t *testing.T) {
	ctx := context.Background()
	rdb := newRDB(t, srv.Addr)
	key := resizeKey(t, rdb)
	c := newSemaphore(t, rdb, 2)
	for _, n := range []int{0, -1, redislock.MaxPermits + 1} {
		if err := c.Resize(ctx, key, n); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("Resize(%d): %v", n, err)
		}
	}
	if err := c.Resize(ctx, "", 2); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Resize of an empty key: %v", err)
	}
	if _, err := redislock.NewSemaphore(rdb, redislock.StoredSize); err != nil {
		t.Errorf("NewSemaphore(StoredSize): %v", err)
	}
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
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := c.Resize(cctx, key, 3); !errors.Is(err, context.Canceled) {
		t.Errorf("Resize with a cancelled context: %v", err)
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

// TestSemaphoreResizeFreeKeyByAdopter: a resize by a Client made with
// StoredSize of a key nobody holds leaves the size before it unknown: the
// first Client that comes with a size of its own sets it, and a Client of a
// third size is refused.
func TestSemaphoreResizeFreeKeyByAdopter(t *testing.T) {
	ctx := context.Background()
	rdb := newRDB(t, srv.Addr)
	key := resizeKey(t, rdb)
	if err := newSemaphore(t, rdb, redislock.StoredSize).Resize(ctx, key, 1); err != nil {
		t.Fatal(err)
	}
	held := holdN(t, newSemaphore(t, rdb, 2), key, 1)
	if _, err := newSemaphore(t, rdb, 2).TryLock(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
		t.Errorf("a second permit of a semaphore resized to 1: %v", err)
	}
	if _, err := newSemaphore(t, rdb, 3).TryLock(ctx, key); !errors.Is(err, redislock.ErrLimitMismatch) {
		t.Errorf("a Client of a third size: %v", err)
	}
	_ = held[0].Unlock(ctx)
}
