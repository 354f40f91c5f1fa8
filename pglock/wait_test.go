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
		ok := d.ln.n-d.ln.nkeep == n && d.ln.live // subscriptions and holdings, not attempts
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

// caughtUp waits until every driver's listener has received every notification
// committed so far: it sends a marker after them (notifications arrive in
// commit order) and waits for each listener to wake a subscription to it.
// It returns the wakes the marker caused (one per driver).
func caughtUp(t *testing.T, drivers []*Driver) int64 {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	marker := dlocktest.Key(t) + "-marker"
	var wakes []<-chan struct{}
	for _, d := range drivers {
		w, cancel, err := d.Subscribe(ctx, driver.Holding{Key: marker})
		if err != nil {
			t.Fatal(err)
		}
		defer cancel()
		select { // a subscription to a live connection is woken at once
		case <-w:
		default:
		}
		wakes = append(wakes, w)
	}
	admin(t, "SELECT pg_notify($1, $2)", DefaultTable, marker)
	for i, w := range wakes {
		select {
		case <-w:
		case <-ctx.Done():
			t.Fatalf("driver %d: the marker never arrived", i)
		}
	}
	return int64(len(drivers))
}

// listeningDriver returns a Driver whose listening connection is up, kept by
// a subscription of its own until the test ends: a waiter that subscribes
// to it is not woken for an attempt more (see Subscribe), so that its Lock
// makes no attempt after it subscribed until it is woken.
func listeningDriver(t *testing.T) *Driver {
	t.Helper()
	d := newDriver(t)
	keepListening(t, d)
	return d
}

// keepListening starts d's listening connection and keeps it, by a
// subscription of its own, until the test ends: it does not close in the
// pauses between the test's waits and holdings (listenLinger), however long
// a loaded machine makes them.
func keepListening(t *testing.T, d *Driver) {
	t.Helper()
	_, stop, err := d.Subscribe(ctxT(t, 10*time.Second), driver.Holding{Key: dlocktest.Key(t) + "-listen"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	listening(t, d)
}

// wakes sums the waiters that the drivers' listeners woke on notifications.
func wakes(drivers []*Driver) (n int64) {
	for _, d := range drivers {
		_, w, _ := d.ListenerStats()
		n += w
	}
	return n
}

// A release wakes one waiter, not every one: n Clients, each with a Driver,
// a pool and a listening connection of its own (as n processes), wait for
// a key; its release wakes one of them, and the lock then passes through
// them all, each release waking the next, none left to the fallback (the
// holder's TTL).
func TestReleaseWakesOneWaiter(t *testing.T) {
	const n = 6
	const ttl = 30 * time.Second
	ctx := ctxT(t, 60*time.Second)
	key := dlocktest.Key(t)
	l, err := newClient(t).TryLock(ctx, key, dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	drivers := make([]*Driver, n)
	leases := make(chan *dlock.Lease, n)
	for i := range drivers {
		drivers[i] = listeningDriver(t)
		got := waitFor(t, clientOf(t, drivers[i], dlock.WithTTL(ttl)), key)
		go func() { leases <- <-got }()
		subscribed(t, drivers[i], 2)
	}
	w0 := wakes(drivers)
	start := time.Now()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	marker := caughtUp(t, drivers)
	if w := wakes(drivers) - w0 - marker; w != 1 {
		t.Errorf("a release woke %d of %d waiters, want 1", w, n)
	}
	for i := range n {
		select {
		case next := <-leases:
			if next == nil {
				t.FailNow()
			}
			if err := next.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		case <-time.After(ttl / 3):
			t.Fatalf("hand-over %d: no waiter got the lock %v after the release", i, ttl/3)
		}
	}
	t.Logf("the lock passed through %d waiters in %v", n, time.Since(start))
	marker = caughtUp(t, drivers)
	if w := wakes(drivers) - w0 - 2*marker; w != n {
		t.Errorf("%d releases with waiters woke %d waiters, want %d", n, w, n)
	}
}

// wakeObserver calls its function when its waiter is woken.
type wakeObserver struct {
	dlock.NopObserver
	f func()
}

func (o wakeObserver) Wake(context.Context, dlock.Target) { o.f() }

// A waiter that a release woke and that gives up before it takes the lock
// passes the wake-up on to the next waiter, which gets the lock at once, not
// after the fallback (the holder's TTL).
func TestWokenWaiterThatLeavesPassesTheWakeOn(t *testing.T) {
	const ttl = 30 * time.Second
	ctx := ctxT(t, 60*time.Second)
	key := dlocktest.Key(t)
	l, err := newClient(t).TryLock(ctx, key, dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	// The first waiter gives up as soon as it is woken. Its listening
	// connection is up before it waits (a waiter is woken when it comes up).
	first := listeningDriver(t)
	fctx, leave := context.WithCancel(ctx)
	defer leave()
	left := make(chan error, 1)
	fc := clientOf(t, first, dlock.WithObserver(wakeObserver{f: leave}))
	go func() {
		l, err := fc.Lock(fctx, key)
		if err == nil {
			_ = l.Unlock(ctx)
		}
		left <- err
	}()
	subscribed(t, first, 2)
	second := listeningDriver(t)
	got := waitFor(t, clientOf(t, second), key)
	subscribed(t, second, 2)
	start := time.Now()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-left:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the first waiter: %v, want it to give up when woken", err)
		}
	case <-time.After(ttl / 3):
		t.Fatal("the first waiter was not woken by the release")
	}
	select {
	case next := <-got:
		if next == nil {
			t.FailNow()
		}
		t.Logf("the second waiter got the lock %v after the release", time.Since(start))
		_ = next.Unlock(ctx)
	case <-time.After(ttl / 3):
		t.Fatalf("the second waiter did not get the lock %v after the release: the wake-up was not passed on", ttl/3)
	}
	if _, w, _ := second.ListenerStats(); w != 1 {
		t.Errorf("the second waiter was woken %d times by notifications, want 1", w)
	}
}

// A waiter whose wake-up is lost (its process died while it waited) costs
// the others at most the fallback (the holder's remaining TTL), and only
// once: the release that woke it took it out of the queue.
func TestDeadWaiterCostsAtMostTheTTL(t *testing.T) {
	const ttl = 1500 * time.Millisecond
	ctx := ctxT(t, 30*time.Second)
	key := dlocktest.Key(t)
	l, wd, got := heldAndWaited(t, key, ttl)
	taken := time.Now()
	admin(t, "UPDATE dlock_locks SET waiters = '{dead0123456789abdead0123456789ab}' || waiters WHERE key = $1", key)
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	var next *dlock.Lease
	select {
	case next = <-got:
	case <-time.After(ttl + 10*time.Second):
		t.Fatal("the waiter behind a dead one never got the lock")
	}
	el := time.Since(taken)
	t.Logf("the waiter behind a dead one got the lock %v after a %v lease was taken", el, ttl)
	if next == nil || el > ttl+2*time.Second {
		t.Fatalf("waiter behind a dead one: %v after %v", next, el)
	}
	if _, w, _ := wd.ListenerStats(); w != 0 {
		t.Errorf("the waiter was woken %d times by notifications, want 0 (the release woke the dead one)", w)
	}
	var queue []string
	if err := newPool(t).QueryRow(ctx, "SELECT waiters FROM dlock_locks WHERE key = $1", key).Scan(&queue); err != nil {
		t.Fatal(err)
	}
	if len(queue) != 0 {
		t.Errorf("queue %q after the hand-over, want it empty", queue)
	}
	_ = next.Unlock(ctx)
}

// A released lock that a waiter was woken for is kept for it: the releasing
// process, locking again at once, does not take it from under the waiter,
// which gets it.
func TestReleaseKeepsTheLockForTheWokenWaiter(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	key := dlocktest.Key(t)
	c := newClient(t, dlock.WithTTL(30*time.Second))
	for i := range 5 {
		l, err := c.TryLock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		wd := listeningDriver(t)
		got := waitFor(t, clientOf(t, wd), key)
		subscribed(t, wd, 2)
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if again, err := c.TryLock(ctx, key); err == nil {
			_ = again.Unlock(ctx)
			t.Fatalf("cycle %d: the releasing Client took the lock back from under the woken waiter", i)
		} else if !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatal(err)
		}
		next := <-got
		if next == nil {
			t.FailNow()
		}
		if err := next.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
