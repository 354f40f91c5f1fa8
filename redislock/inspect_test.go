package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/redislock"
)

func TestInspectListForceUnlock(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	key := dlocktest.Key(t)

	info, err := c.Inspect(ctx, key)
	if err != nil || info.Held || info.Key != key || info.LastToken != 0 {
		t.Fatalf("free lock: %+v, %v", info, err)
	}
	lease, err := c.Lock(ctx, key, dlock.WithMetadata("job 7"), dlock.WithTTL(time.Second), dlock.WithAutoRenew(true))
	if err != nil {
		t.Fatal(err)
	}
	info, err = c.Inspect(ctx, key)
	if err != nil || !info.Held || info.Owner != lease.Owner() || info.Token != lease.Token() ||
		info.Metadata != "job 7" || info.TTL <= 0 || info.TTL > time.Second || info.LastToken != lease.Token() {
		t.Fatalf("held lock: %+v, %v", info, err)
	}

	other := key + ":other"
	lease2, err := c.Lock(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	defer lease2.Unlock(ctx)
	list, err := c.List(ctx, key+"*")
	if err != nil || len(list) != 2 || list[0].Key != key || list[1].Key != other {
		t.Fatalf("List: %+v, %v", list, err)
	}

	removed, err := c.ForceUnlock(ctx, key)
	if err != nil || removed.Owner != lease.Owner() || removed.Token != lease.Token() {
		t.Fatalf("ForceUnlock: %+v, %v", removed, err)
	}
	select {
	case <-lease.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the holder did not learn of the forced release")
	}
	if !errors.Is(lease.Err(), dlock.ErrLockLost) {
		t.Errorf("holder's error %v, want ErrLockLost", lease.Err())
	}
	if info, err := c.Inspect(ctx, key); err != nil || info.LastToken < removed.Token {
		t.Errorf("after ForceUnlock: %+v, %v; want the last token kept", info, err)
	}
	if _, err := c.ForceUnlock(ctx, key); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("ForceUnlock of a free lock: %v, want ErrNotHeld", err)
	}
	next, err := c.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Unlock(ctx)
	if next.Token() <= removed.Token {
		t.Errorf("token after ForceUnlock %d not above %d", next.Token(), removed.Token)
	}
}

func TestInspectBadInput(t *testing.T) {
	c := newClient(t)
	rdb := newRDB(t, srv.Addr)
	ctx := context.Background()
	if _, err := c.Inspect(ctx, ""); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("empty key: %v", err)
	}
	for _, p := range []string{"", "a{b", "x\x00"} {
		if _, err := c.List(ctx, p); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("pattern %q: %v", p, err)
		}
	}
	key := dlocktest.Key(t)
	rdb.Set(ctx, redislock.LockKey(key), "foreign", time.Minute)
	if _, err := c.Inspect(ctx, key); !errors.Is(err, dlock.ErrConflict) {
		t.Errorf("foreign string: %v, want ErrConflict", err)
	}
	if _, err := c.ForceUnlock(ctx, key); !errors.Is(err, dlock.ErrConflict) {
		t.Errorf("ForceUnlock of foreign data: %v, want ErrConflict", err)
	}
	if list, err := c.List(ctx, key+"*"); err != nil || len(list) != 0 {
		t.Errorf("List skips foreign data: %+v %v", list, err)
	}
	var nilClient *redislock.Client
	if _, err := nilClient.Inspect(ctx, key); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("nil client: %v", err)
	}
}

func TestListManyLocks(t *testing.T) {
	c := newClient(t, dlock.WithTTL(time.Minute))
	ctx := context.Background()
	prefix := dlocktest.Key(t)
	const n = 600 // more than one pipelined batch
	for i := 0; i < n; i++ {
		lease, err := c.TryLock(ctx, fmt.Sprintf("%s:%04d", prefix, i))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lease.Unlock(context.Background()) })
	}
	list, err := c.List(ctx, prefix+":*")
	if err != nil || len(list) != n {
		t.Fatalf("List: %d locks, %v; want %d", len(list), err, n)
	}
	for i, info := range list {
		if want := fmt.Sprintf("%s:%04d", prefix, i); info.Key != want || !info.Held || info.Token == 0 {
			t.Fatalf("List[%d] = %+v, want %s held", i, info, want)
		}
	}
}

// TestInspectCountsPlainLockWaiters checks that the Inspector, the Client and
// List count the processes waiting for a plain lock (its waiting set), name it
// a mutex all the same, and count 0 once nobody waits.
func TestInspectCountsPlainLockWaiters(t *testing.T) {
	ctx := context.Background()
	key := dlocktest.Key(t)
	holder := newClient(t)
	lease, err := holder.TryLock(ctx, key, dlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	in, err := redislock.NewInspector(newRDB(t, srv.Addr))
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	got := make(chan error, 2)
	for range 2 { // two processes: a Client each
		w := newClient(t)
		go func() {
			l, err := w.Lock(wctx, key)
			if err == nil {
				err = l.Unlock(ctx)
			}
			got <- err
		}()
	}
	waiters := func() (dlock.LockInfo, dlock.LockInfo, []dlock.LockInfo) {
		t.Helper()
		a, err := in.Inspect(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		b, err := holder.Inspect(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		l, err := driver.List(ctx, in, key)
		if err != nil || len(l) != 1 {
			t.Fatalf("List: %+v, %v", l, err)
		}
		return a, b, l
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		a, b, l := waiters()
		if a.Waiters == 2 && b.Waiters == 2 && l[0].Waiters == 2 {
			if a.Kind != driver.KindMutex || l[0].Kind != driver.KindMutex {
				t.Errorf("a plain lock with waiters is named %q (List %q), want %q", a.Kind, l[0].Kind, driver.KindMutex)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiters: Inspector %d, Client %d, List %d; want 2 waiting processes", a.Waiters, b.Waiters, l[0].Waiters)
		}
		time.Sleep(20 * time.Millisecond) // polling the server: the waiters join when subscribed
	}
	stop()
	for range 2 {
		if err := <-got; !errors.Is(err, context.Canceled) {
			t.Errorf("waiter: %v, want context.Canceled", err)
		}
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lease, err = holder.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Unlock(ctx)
	if a, _, l := waiters(); a.Waiters != 0 || l[0].Waiters != 0 {
		t.Errorf("nobody waits: Inspector %d, List %d waiters, want 0", a.Waiters, l[0].Waiters)
	}
}
