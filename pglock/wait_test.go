package pglock

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
)

// waitFor takes key with c (in the background) and returns a channel that
// receives the lease, or nil on an error, which it reports.
func waitFor(t *testing.T, c *Client, key string, opts ...dlock.Option) <-chan *dlock.Lease {
	t.Helper()
	got := make(chan *dlock.Lease, 1)
	go func() {
		l, err := c.Lock(context.Background(), key, append([]dlock.Option{dlock.WithWait(30 * time.Second)}, opts...)...)
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		got <- l
	}()
	return got
}

// subscribed waits until d has n open subscriptions and a live connection.
func subscribed(t *testing.T, d *Driver, n int) {
	t.Helper()
	for i := 0; i < 1000; i++ {
		d.ln.mu.Lock()
		ok := d.ln.n == n && d.ln.live
		d.ln.mu.Unlock()
		if ok {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%d waiters never subscribed on a live connection", n)
}

// heldAndWaited takes key with a lease of ttl in one process and has the
// Lock of another process wait for it, subscribed on a live connection. It
// returns the holder's lease, the waiter's Driver, and the waiter's channel
// (see waitFor).
func heldAndWaited(t *testing.T, key string, ttl time.Duration) (*dlock.Lease, *Driver, <-chan *dlock.Lease) {
	t.Helper()
	l, err := newClient(t).TryLock(ctxT(t, 10*time.Second), key, dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	wd := newDriver(t)
	w, _ := NewClient(wd)
	got := waitFor(t, w, key)
	subscribed(t, wd, 1)
	return l, wd, got
}

func TestReleaseWakesWaitersOfOtherProcesses(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	l, wd, got := heldAndWaited(t, dlocktest.Key(t), 30*time.Second)
	start := time.Now()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	var next *dlock.Lease
	select {
	case next = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("waiter not woken 10s after the release of a 30s lease")
	}
	el := time.Since(start)
	t.Logf("waiter got the lock %v after the release", el)
	if next == nil || el > 5*time.Second {
		t.Fatalf("waiter: %v after %v", next, el)
	}
	if _, wakes, subs := wd.ListenerStats(); wakes == 0 || subs != 0 {
		t.Errorf("wakes %d, subscriptions left %d", wakes, subs)
	}
	_ = next.Unlock(ctx)
}

// A release whose NOTIFY is lost (here: the row freed by hand, without one)
// costs the waiter at most the holder's remaining TTL.
func TestLostNotifyCostsAtMostTheTTL(t *testing.T) {
	key := dlocktest.Key(t)
	const ttl = 1500 * time.Millisecond
	ctx := ctxT(t, 30*time.Second)
	taken := time.Now()
	_, _, got := heldAndWaited(t, key, ttl)
	admin(t, "UPDATE dlock_locks SET owner = '', expires_at = clock_timestamp() WHERE key = $1", key)
	select {
	case l := <-got:
		el := time.Since(taken)
		t.Logf("waiter got the lock %v after a %v lease was taken, its release unannounced", el, ttl)
		if l == nil || el > ttl+2*time.Second {
			t.Fatalf("waiter after a lost notification: %v after %v", l, el)
		}
		_ = l.Unlock(ctx)
	case <-time.After(ttl + 10*time.Second):
		t.Fatal("waiter never got the lock after a lost notification")
	}
}

func TestListenerReconnectsAfterItsConnectionIsKilled(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	l, wd, got := heldAndWaited(t, dlocktest.Key(t), 30*time.Second)
	admin(t, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN%' AND pid <> pg_backend_pid()")
	for i := 0; ; i++ {
		if c, _, _ := wd.ListenerStats(); c >= 2 {
			break
		}
		if i == 1000 {
			t.Fatal("listener did not reconnect")
		}
		time.Sleep(5 * time.Millisecond)
	}
	subscribed(t, wd, 1)
	start := time.Now()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case next := <-got:
		t.Logf("waiter got the lock %v after the release, its listener reconnected", time.Since(start))
		if next == nil || time.Since(start) > 5*time.Second {
			t.Fatalf("waiter: %v after %v", next, time.Since(start))
		}
		_ = next.Unlock(ctx)
	case <-time.After(10 * time.Second):
		t.Fatal("waiter not woken after its listener reconnected")
	}
}

func TestRefusedListenFallsBackToPolling(t *testing.T) {
	key := dlocktest.Key(t)
	const ttl = time.Second
	holder := newClient(t)
	ctx := ctxT(t, 30*time.Second)
	if _, err := holder.TryLock(ctx, key, dlock.WithTTL(ttl)); err != nil {
		t.Fatal(err)
	}
	taken := time.Now()
	wd := newDriver(t)
	wd.SetListenStatement("SELECT 1/0") // the server refuses it (division by zero)
	w, _ := NewClient(wd)
	l, err := w.Lock(ctx, key, dlock.WithWait(10*time.Second))
	if err != nil {
		t.Fatalf("Lock with LISTEN refused: %v", err)
	}
	t.Logf("waiter got the lock %v after a %v lease was taken, polling", time.Since(taken), ttl)
	_ = l.Unlock(ctx)
	if _, _, err := wd.Subscribe(ctx, driver.Holding{Key: key}); !errors.Is(err, dlock.ErrRefused) {
		t.Errorf("Subscribe after LISTEN was refused: %v, want ErrRefused", err)
	}
	if _, _, subs := wd.ListenerStats(); subs != 0 {
		t.Errorf("%d subscriptions left", subs)
	}
}

// listeners counts the server's LISTENing connections.
func listeners(t *testing.T) int {
	t.Helper()
	var n int
	if err := newPool(t).QueryRow(ctxT(t, 5*time.Second),
		"SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN%' AND state = 'idle'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Many waiters of several processes giving up at random moments leave no row
// held beyond its TTL, no subscription and no listening connection.
func TestCancellationStormLeavesNoRowNorListener(t *testing.T) {
	key := dlocktest.Key(t)
	// Other tests' Drivers that still hold locks keep their LISTEN
	// connections (their holders are told of a force-unlock through them).
	before := listeners(t)
	holder := newClient(t)
	ctx := ctxT(t, 60*time.Second)
	l, err := holder.TryLock(ctx, key, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	var drivers []*Driver
	for i := 0; i < 4; i++ {
		drivers = append(drivers, newDriver(t))
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	obtained := 0
	for i := 0; i < 80; i++ {
		d := drivers[i%len(drivers)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, _ := NewClient(d)
			cctx, cancel := context.WithTimeout(ctx, time.Duration(rand.N(300))*time.Millisecond)
			defer cancel()
			if i%20 == 0 { // a few free the lock while the others wait
				_ = l.Unlock(ctx)
			}
			lease, err := c.Lock(cctx, key, dlock.WithTTL(10*time.Second))
			if err == nil {
				mu.Lock()
				obtained++
				mu.Unlock()
				_ = lease.Unlock(ctx)
			} else if !errors.Is(err, dlock.ErrNotObtained) && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("cancelled Lock: %v", err)
			}
		}()
	}
	wg.Wait()
	t.Logf("80 waiters cancelled at random: %d obtained the lock", obtained)
	for _, d := range drivers {
		if _, _, subs := d.ListenerStats(); subs != 0 {
			t.Errorf("%d subscriptions left", subs)
		}
	}
	for i := 0; listeners(t) > before; i++ {
		if i == 100 { // the server notices a closed connection at once; allow it a moment
			t.Fatalf("%d listening connections left", listeners(t)-before)
		}
		time.Sleep(10 * time.Millisecond)
	}
	info, err := drivers[0].Inspect(ctx, key)
	if err != nil || info.Held {
		t.Fatalf("lock left held after the storm: %+v, %v", info, err)
	}
}
