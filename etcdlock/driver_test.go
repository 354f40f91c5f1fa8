package etcdlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	mrand "math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

var srv *testserver.Etcd

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(runHelper(mode))
	}
	os.Exit(testserver.MainEtcd(m, func(e *testserver.Etcd) { srv = e }))
}

// newEtcd returns a client of its own to endpoints (the test server when none),
// closed by t.Cleanup.
func newEtcd(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	if len(endpoints) == 0 {
		endpoints = []string{srv.Addr}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

func newDriver(t testing.TB, endpoints ...string) *Driver {
	t.Helper()
	d, err := NewDriver(newEtcd(t, endpoints...))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func testKey(t testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "etcdlock." + strings.ReplaceAll(t.Name(), "/", ".") + "." + hex.EncodeToString(b[:])
}

func owner() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// entries returns the owners queued for key, oldest first.
func entries(t testing.TB, cli *clientv3.Client, key string) []string {
	t.Helper()
	resp, err := cli.Get(ctxT(t, 5*time.Second), QueuePrefix(key), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		t.Fatal(err)
	}
	var owners []string
	for _, kv := range resp.Kvs {
		owners = append(owners, strings.TrimPrefix(string(kv.Key), QueuePrefix(key)))
	}
	return owners
}

func mustGrant(t testing.TB, d *Driver, r driver.AcquireRequest) driver.Grant {
	t.Helper()
	g, err := d.Acquire(ctxT(t, 5*time.Second), r)
	if err != nil {
		t.Fatalf("Acquire(%+v): %v", r, err)
	}
	return g
}

func mustBusy(t testing.TB, d *Driver, r driver.AcquireRequest) *driver.Taken {
	t.Helper()
	_, err := d.Acquire(ctxT(t, 5*time.Second), r)
	var busy *driver.Taken
	if !errors.As(err, &busy) || !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("Acquire(%+v): %v, want *driver.Taken", r, err)
	}
	return busy
}

func TestTryLockNeverQueues(t *testing.T) {
	d, cli := newDriver(t), newEtcd(t)
	key := testKey(t)
	a, b := owner(), owner()
	ga := mustGrant(t, d, driver.AcquireRequest{Key: key, Owner: a, TTL: 10 * time.Second, Metadata: "job 1"})
	if ga.Token == 0 || ga.TTL != 10*time.Second {
		t.Fatalf("grant %+v", ga)
	}
	busy := mustBusy(t, d, driver.AcquireRequest{Key: key, Owner: b, TTL: 10 * time.Second})
	if busy.Remaining <= 0 || busy.Remaining > 10*time.Second || busy.Handle != nil {
		t.Errorf("busy %+v, want remaining in (0, 10s] and no handle", busy)
	}
	if got := entries(t, cli, key); len(got) != 1 || got[0] != a {
		t.Fatalf("entries after a busy TryLock: %v, want only the holder", got)
	}
	// A queued waiter also makes TryLock fail, once the holder has gone.
	w := owner()
	wb := mustBusy(t, d, driver.AcquireRequest{Key: key, Owner: w, TTL: 10 * time.Second, Waiting: true})
	if err := d.Release(ctxT(t, 5*time.Second), driver.Holding{Key: key, Owner: a, Handle: ga.Handle}); err != nil {
		t.Fatal(err)
	}
	mustBusy(t, d, driver.AcquireRequest{Key: key, Owner: b, TTL: 10 * time.Second})
	gw := mustGrant(t, d, driver.AcquireRequest{Key: key, Owner: w, TTL: 10 * time.Second, Waiting: true, Handle: wb.Handle})
	if gw.Token <= ga.Token {
		t.Errorf("waiter token %d not above %d", gw.Token, ga.Token)
	}
	if err := d.Release(ctxT(t, 5*time.Second), driver.Holding{Key: key, Owner: w, Handle: gw.Handle}); err != nil {
		t.Fatal(err)
	}
	if got := entries(t, cli, key); len(got) != 0 {
		t.Fatalf("entries after every release: %v", got)
	}
	gb := mustGrant(t, d, driver.AcquireRequest{Key: key, Owner: b, TTL: 10 * time.Second})
	if gb.Token <= gw.Token {
		t.Errorf("token %d not above %d", gb.Token, gw.Token)
	}
	_ = d.Release(ctxT(t, 5*time.Second), driver.Holding{Key: key, Owner: b, Handle: gb.Handle})
}

func TestWaiterKeepsItsEntryAcrossAttempts(t *testing.T) {
	d, cli := newDriver(t), newEtcd(t)
	key := testKey(t)
	a, w := owner(), owner()
	ga := mustGrant(t, d, driver.AcquireRequest{Key: key, Owner: a, TTL: 10 * time.Second})
	r := driver.AcquireRequest{Key: key, Owner: w, TTL: 3 * time.Second, Waiting: true}
	b1 := mustBusy(t, d, r)
	if b1.Handle == nil || b1.RetryAfter != time.Second {
		t.Fatalf("waiter's busy %+v, want a handle and RetryAfter 1s (a third of its lease)", b1)
	}
	rev, _, _ := b1.Handle.(*queueEntry).state()
	r.Handle = b1.Handle
	for i := 0; i < 3; i++ {
		b := mustBusy(t, d, r)
		if got, _, _ := b.Handle.(*queueEntry).state(); got != rev {
			t.Fatalf("attempt %d: entry revision %d, want %d (the same entry)", i, got, rev)
		}
	}
	// A first attempt whose reply was lost (no handle) finds the entry again.
	b := mustBusy(t, d, driver.AcquireRequest{Key: key, Owner: w, TTL: 3 * time.Second, Waiting: true})
	if got, _, _ := b.Handle.(*queueEntry).state(); got != rev {
		t.Fatalf("retried first attempt: revision %d, want %d", got, rev)
	}
	if got := entries(t, cli, key); len(got) != 2 || got[0] != a || got[1] != w {
		t.Fatalf("entries %v, want holder then waiter", got)
	}
	if err := d.Abandon(ctxT(t, 5*time.Second), driver.Holding{Key: key, Owner: w, Handle: b.Handle}); err != nil {
		t.Fatal(err)
	}
	if got := entries(t, cli, key); len(got) != 1 {
		t.Fatalf("entries after Abandon: %v", got)
	}
	_ = d.Release(ctxT(t, 5*time.Second), driver.Holding{Key: key, Owner: a, Handle: ga.Handle})
}

// TestWaitersWakeOnlyWhenTheirTurnComes queues waiters, each on a driver of its
// own, and checks that every release wakes exactly the next waiter: each waiter
// is woken once in all, when the entry before it is gone, and once more when a
// waiter just ahead of it gives up.
func TestWaitersWakeOnlyWhenTheirTurnComes(t *testing.T) {
	const n = 4
	key := testKey(t)
	holder := newDriver(t)
	ho := owner()
	g := mustGrant(t, holder, driver.AcquireRequest{Key: key, Owner: ho, TTL: 10 * time.Second})
	ctx := ctxT(t, 30*time.Second)
	type waiter struct {
		d      *Driver
		owner  string
		h      any
		wake   <-chan struct{}
		cancel func()
	}
	ws := make([]*waiter, n)
	for i := range ws {
		w := &waiter{d: newDriver(t), owner: owner()}
		b := mustBusy(t, w.d, driver.AcquireRequest{Key: key, Owner: w.owner, TTL: 10 * time.Second, Waiting: true})
		w.h = b.Handle
		wake, cancel, err := w.d.Subscribe(ctx, driver.Holding{Key: key, Owner: w.owner, Handle: w.h})
		if err != nil {
			t.Fatal(err)
		}
		w.wake, w.cancel = wake, cancel
		ws[i] = w
	}
	// The last waiter gives up: the one before it is not woken by that.
	last := ws[n-1]
	last.cancel()
	if err := last.d.Abandon(ctx, driver.Holding{Key: key, Owner: last.owner, Handle: last.h}); err != nil {
		t.Fatal(err)
	}
	// The second waiter gives up: the third, woken, finds the lock held, and
	// now waits on the first.
	second := ws[1]
	second.cancel()
	if err := second.d.Abandon(ctx, driver.Holding{Key: key, Owner: second.owner, Handle: second.h}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ws[2].wake:
	case <-ctx.Done():
		t.Fatal("the third waiter not woken when the one ahead of it gave up")
	}
	mustBusy(t, ws[2].d, driver.AcquireRequest{Key: key, Owner: ws[2].owner, TTL: 10 * time.Second, Waiting: true, Handle: ws[2].h})
	if len(ws[0].wake) != 0 {
		t.Fatal("the first waiter woken while the holder holds")
	}
	order := []*waiter{ws[0], ws[2]}
	prev := driver.Holding{Key: key, Owner: ho, Handle: g.Handle}
	prevD := holder
	for i, w := range order {
		if err := prevD.Release(ctx, prev); err != nil {
			t.Fatal(err)
		}
		select {
		case <-w.wake:
		case <-ctx.Done():
			t.Fatalf("waiter %d never woken", i)
		}
		gw := mustGrant(t, w.d, driver.AcquireRequest{Key: key, Owner: w.owner, TTL: 10 * time.Second, Waiting: true, Handle: w.h})
		prev, prevD = driver.Holding{Key: key, Owner: w.owner, Handle: gw.Handle}, w.d
		for j, o := range order[i+1:] {
			if len(o.wake) != 0 {
				t.Fatalf("waiter %d woken while waiter %d holds", i+1+j, i)
			}
		}
	}
	if err := prevD.Release(ctx, prev); err != nil {
		t.Fatal(err)
	}
	ws[0].cancel()
	ws[2].cancel()
	for i, w := range ws {
		want := int64(1)
		switch w {
		case second, last:
			want = 0
		case ws[2]:
			want = 2 // the second's abandonment, and its turn
		}
		if got := w.d.wakes.Load(); got != want {
			t.Errorf("waiter %d woken %d times, want %d", i, got, want)
		}
	}
}

// TestDeadWaiterLeavesNoEntry closes the etcd client of a waiter (its process
// died) and checks that its queue entry goes within the lease TTL, so the
// waiter behind it moves up.
func TestDeadWaiterLeavesNoEntry(t *testing.T) {
	key := testKey(t)
	watcher := newEtcd(t)
	d := newDriver(t)
	ho := owner()
	g := mustGrant(t, d, driver.AcquireRequest{Key: key, Owner: ho, TTL: 10 * time.Second})
	deadCli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Addr}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	dead, _ := NewDriver(deadCli)
	do := owner()
	mustBusy(t, dead, driver.AcquireRequest{Key: key, Owner: do, TTL: time.Second, Waiting: true})
	resp, err := watcher.Get(ctxT(t, 5*time.Second), EntryKey(key, do))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("waiter's entry: %v %v", resp, err)
	}
	ctx := ctxT(t, 10*time.Second)
	wch := watcher.Watch(ctx, EntryKey(key, do), clientv3.WithRev(resp.Header.Revision+1))
	start := time.Now()
	_ = deadCli.Close()
	select {
	case wr := <-wch:
		if len(wr.Events) != 1 || wr.Events[0].Type != clientv3.EventTypeDelete {
			t.Fatalf("watch: %+v %v", wr.Events, wr.Err())
		}
	case <-ctx.Done():
		t.Fatal("dead waiter's entry still there after 10s")
	}
	t.Logf("dead waiter's entry gone %v after its client closed (lease 1s)", time.Since(start))
	if got := entries(t, watcher, key); len(got) != 1 || got[0] != ho {
		t.Fatalf("entries %v", got)
	}
	_ = d.Release(ctxT(t, 5*time.Second), driver.Holding{Key: key, Owner: ho, Handle: g.Handle})
}

func TestExtendRenewsOrMovesTheLease(t *testing.T) {
	d := newDriver(t)
	key, o := testKey(t), owner()
	g := mustGrant(t, d, driver.AcquireRequest{Key: key, Owner: o, TTL: 1500 * time.Millisecond})
	if g.TTL != 2*time.Second {
		t.Fatalf("1.5s rounds up to %v, want 2s", g.TTL)
	}
	h := driver.Holding{Key: key, Owner: o, Handle: g.Handle}
	ctx := ctxT(t, 10*time.Second)
	_, lease, _ := g.Handle.(*queueEntry).state()
	if got, err := d.Extend(ctx, h, 2*time.Second); err != nil || got != 2*time.Second {
		t.Fatalf("Extend(2s): %v, %v", got, err)
	}
	if _, l, _ := g.Handle.(*queueEntry).state(); l != lease {
		t.Fatal("Extend with the granted TTL changed the lease")
	}
	if got, err := d.Extend(ctx, h, 20*time.Second); err != nil || got != 20*time.Second {
		t.Fatalf("Extend(20s): %v, %v", got, err)
	}
	rev, next, _ := g.Handle.(*queueEntry).state()
	if next == lease || uint64(rev) != g.Token {
		t.Fatalf("Extend(20s): lease %x (was %x), revision %d (token %d)", next, lease, rev, g.Token)
	}
	if ttl, err := d.TTL(ctx, h); err != nil || ttl <= 15*time.Second || ttl > 20*time.Second {
		t.Fatalf("TTL after Extend(20s): %v, %v", ttl, err)
	}
	if info, err := d.Inspect(ctx, key); err != nil || info.Token != g.Token || info.Owner != o {
		t.Fatalf("Inspect after Extend: %+v, %v", info, err)
	}
	// The entry left the lease of the 2s locks, which stays (shared).
	if resp, err := d.cli.TimeToLive(ctx, lease, clientv3.WithAttachedKeys()); err != nil || resp.TTL <= 0 || len(resp.Keys) != 0 {
		t.Errorf("old lease: %+v, %v; want alive and empty", resp, err)
	}
	// A lost lease is a lost lock.
	if _, err := d.cli.Revoke(ctx, next); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Extend(ctx, h, 20*time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Extend after the lease was revoked: %v, want ErrNotHeld", err)
	}
	if _, err := d.Extend(ctx, h, 5*time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Extend(5s) after the lease was revoked: %v, want ErrNotHeld", err)
	}
	if _, err := d.TTL(ctx, h); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("TTL after the lease was revoked: %v, want ErrNotHeld", err)
	}
	if err := d.Release(ctx, h); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release after the lease was revoked: %v, want ErrNotHeld", err)
	}
}

func TestStaleReleaseTouchesNothing(t *testing.T) {
	d := newDriver(t)
	key, o := testKey(t), owner()
	ctx := ctxT(t, 10*time.Second)
	g1 := mustGrant(t, d, driver.AcquireRequest{Key: key, Owner: o, TTL: 5 * time.Second})
	if err := d.Release(ctx, driver.Holding{Key: key, Owner: o, Handle: g1.Handle}); err != nil {
		t.Fatal(err)
	}
	// The same owner takes the lock again (a new holding); the stale handle's
	// Release, Extend and TTL must not touch it.
	g2 := mustGrant(t, d, driver.AcquireRequest{Key: key, Owner: o, TTL: 5 * time.Second})
	stale := driver.Holding{Key: key, Owner: o, Handle: g1.Handle}
	if err := d.Release(ctx, stale); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("stale Release: %v", err)
	}
	if _, err := d.Extend(ctx, stale, 5*time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("stale Extend: %v", err)
	}
	if _, err := d.Extend(ctx, stale, 7*time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("stale Extend to a new TTL: %v", err)
	}
	if info, err := d.Inspect(ctx, key); err != nil || info.Token != g2.Token {
		t.Fatalf("holder after stale calls: %+v, %v", info, err)
	}
	// A release without a handle (clean-up of an attempt whose reply was lost)
	// finds the entry by owner.
	if err := d.Release(ctx, driver.Holding{Key: key, Owner: o}); err != nil {
		t.Fatal(err)
	}
	if err := d.Release(ctx, driver.Holding{Key: key, Owner: o}); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("second Release: %v", err)
	}
}

func TestForeignEntryIsConflict(t *testing.T) {
	d, cli := newDriver(t), newEtcd(t)
	key := testKey(t)
	ctx := ctxT(t, 10*time.Second)
	foreignKey := QueuePrefix(key) + "someone"
	if _, err := cli.Put(ctx, foreignKey, "user data"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = cli.Delete(context.Background(), foreignKey) })
	for _, waiting := range []bool{false, true} {
		_, err := d.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: time.Second, Waiting: waiting})
		if !errors.Is(err, dlock.ErrConflict) {
			t.Errorf("Acquire (waiting %v) over a foreign entry: %v, want ErrConflict", waiting, err)
		}
	}
	if got := entries(t, cli, key); len(got) != 1 || got[0] != "someone" {
		t.Fatalf("entries %v, want the foreign one alone", got)
	}
	if _, err := d.Inspect(ctx, key); !errors.Is(err, dlock.ErrConflict) {
		t.Errorf("Inspect: %v", err)
	}
}

func TestBadArguments(t *testing.T) {
	if _, err := NewDriver(nil); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("NewDriver(nil): %v", err)
	}
	d := newDriver(t)
	for _, o := range []Option{nil, WithRequestTimeout(0), WithRequestTimeout(-time.Second)} {
		if _, err := NewDriver(d.cli, o); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("NewDriver with a bad option: %v", err)
		}
	}
	if _, err := NewClient(nil); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("NewClient(nil): %v", err)
	}
	ctx := ctxT(t, 5*time.Second)
	key := testKey(t)
	for _, o := range []string{"", "a/b", "a{b", "\x00"} {
		if _, err := d.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: o, TTL: time.Second}); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("Acquire with owner %q: %v", o, err)
		}
	}
	if _, err := d.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: time.Second, Waiting: true, Handle: "x"}); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Acquire with a foreign handle: %v", err)
	}
	if _, _, err := d.Subscribe(ctx, driver.Holding{Key: key, Owner: owner()}); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Subscribe without a handle: %v", err)
	}
	if l := d.TTLLimits(); l.Min != time.Second || l.Step != time.Second || l.Max < l.Min {
		t.Errorf("TTLLimits %+v", l)
	}
}

// TestNoLeaseLeftBehind runs every operation, the failing ones included, and
// checks that no lease carries anything once every holding is released, and
// that none is left after Close.
func TestNoLeaseLeftBehind(t *testing.T) {
	d := newDriver(t)
	ctx := ctxT(t, 10*time.Second)
	leases := func() map[clientv3.LeaseID]bool {
		resp, err := d.cli.Leases(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ids := map[clientv3.LeaseID]bool{}
		for _, l := range resp.Leases {
			ids[l.ID] = true
		}
		return ids
	}
	before := leases()
	key := testKey(t)
	a, w := owner(), owner()
	ga := mustGrant(t, d, driver.AcquireRequest{Key: key, Owner: a, TTL: 10 * time.Second})
	ha := driver.Holding{Key: key, Owner: a, Handle: ga.Handle}
	mustBusy(t, d, driver.AcquireRequest{Key: key, Owner: owner(), TTL: 10 * time.Second})
	bw := mustBusy(t, d, driver.AcquireRequest{Key: key, Owner: w, TTL: 10 * time.Second, Waiting: true})
	bw = mustBusy(t, d, driver.AcquireRequest{Key: key, Owner: w, TTL: 10 * time.Second, Waiting: true, Handle: bw.Handle})
	if _, err := d.Extend(ctx, ha, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Extend(ctx, ha, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := d.Abandon(ctx, driver.Holding{Key: key, Owner: w, Handle: bw.Handle}); err != nil {
		t.Fatal(err)
	}
	if err := d.Release(ctx, ha); err != nil {
		t.Fatal(err)
	}
	if err := d.Release(ctx, ha); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatal(err)
	}
	// Leases of earlier tests may have expired meanwhile: only new ones count,
	// and the abandonment's mark is meant to stay for a while.
	check := func(when string, empty bool) {
		t.Helper()
		for id := range leases() {
			if before[id] {
				continue
			}
			resp, err := d.cli.TimeToLive(ctx, id, clientv3.WithAttachedKeys())
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Keys) == 1 && string(resp.Keys[0]) == AbandonKey(key, w) || empty && len(resp.Keys) == 0 {
				continue
			}
			t.Errorf("%s: lease %x left behind, carrying %q", when, int64(id), resp.Keys)
		}
	}
	check("after the last release", true)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	check("after Close", false)
}

// TestCancelledAttemptsLeaveNothing cuts acquisition attempts short at random
// points, cleans up the way the Client does (a release of a grant, an
// abandonment of an attempt whose outcome is unknown, on a detached context),
// and checks that no entry of a failed attempt stays behind.
func TestCancelledAttemptsLeaveNothing(t *testing.T) {
	d, cli := newDriver(t), newEtcd(t)
	key := testKey(t)
	var got int
	for i := 0; i < 40; i++ {
		o := owner()
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(mrand.N(3000))*time.Microsecond)
		g, err := d.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: o, TTL: 5 * time.Second, Waiting: i%2 == 0})
		cancel()
		h := driver.Holding{Key: key, Owner: o, TTL: 5 * time.Second, Handle: g.Handle}
		if err == nil {
			got++
			err = d.Release(ctxT(t, 5*time.Second), h)
		} else if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, dlock.ErrUnavailable) {
			t.Fatalf("attempt %d: %v", i, err)
		} else {
			// The attempt's transaction may still land: the Client abandons.
			err = d.Abandon(ctxT(t, 5*time.Second), h)
		}
		if err != nil {
			t.Fatalf("clean-up %d: %v", i, err)
		}
		if left := entries(t, cli, key); len(left) != 0 {
			t.Fatalf("attempt %d (%v) left entries %v", i, err, left)
		}
	}
	t.Logf("40 attempts cut short: %d succeeded", got)
}

// TestAcquireIsIdempotentForItsOwner: an attempt that finds the entry an earlier
// attempt of its owner wrote (whose reply was lost) takes it over with the new
// TTL (moving it to the Driver's lease of that TTL), keeping its token.
func TestAcquireIsIdempotentForItsOwner(t *testing.T) {
	d, cli := newDriver(t), newEtcd(t)
	key, o := testKey(t), owner()
	ctx := ctxT(t, 10*time.Second)
	g1 := mustGrant(t, d, driver.AcquireRequest{Key: key, Owner: o, TTL: 5 * time.Second})
	g2 := mustGrant(t, d, driver.AcquireRequest{Key: key, Owner: o, TTL: 10 * time.Second})
	if g2.Token != g1.Token || g2.TTL != 10*time.Second {
		t.Fatalf("second attempt: %+v, want token %d and TTL 10s", g2, g1.Token)
	}
	if got := entries(t, cli, key); len(got) != 1 || got[0] != o {
		t.Fatalf("entries %v", got)
	}
	_, old, _ := g1.Handle.(*queueEntry).state()
	if _, next, _ := g2.Handle.(*queueEntry).state(); next == old {
		t.Errorf("the entry stayed on the lease of the 5s locks (%x)", int64(old))
	}
	if resp, err := cli.TimeToLive(ctx, old, clientv3.WithAttachedKeys()); err != nil || len(resp.Keys) != 0 {
		t.Errorf("the first attempt's lease: %+v, %v; want empty", resp, err)
	}
	if ttl, err := d.TTL(ctx, driver.Holding{Key: key, Owner: o, Handle: g2.Handle}); err != nil || ttl <= 5*time.Second {
		t.Errorf("TTL after the take-over: %v, %v", ttl, err)
	}
	if err := d.Release(ctx, driver.Holding{Key: key, Owner: o, Handle: g2.Handle}); err != nil {
		t.Fatal(err)
	}
}

// TestAbandonStopsALateAttempt: after Abandon, an attempt of the same
// acquisition still in flight writes nothing, and an entry that landed before
// is gone (the lock is free again).
func TestAbandonStopsALateAttempt(t *testing.T) {
	d, cli := newDriver(t), newEtcd(t)
	key := testKey(t)
	ctx := ctxT(t, 10*time.Second)
	o := owner()
	if err := d.Abandon(ctx, driver.Holding{Key: key, Owner: o, TTL: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	for _, waiting := range []bool{false, true} {
		_, err := d.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: o, TTL: 5 * time.Second, Waiting: waiting})
		if !errors.Is(err, dlock.ErrNotObtained) {
			t.Errorf("late attempt (waiting %v): %v, want ErrNotObtained", waiting, err)
		}
		if got := entries(t, cli, key); len(got) != 0 {
			t.Fatalf("late attempt (waiting %v) wrote %v", waiting, got)
		}
	}
	// A holding abandoned (the Client gave up after its attempt's reply was
	// lost) is released.
	o2 := owner()
	g := mustGrant(t, d, driver.AcquireRequest{Key: key, Owner: o2, TTL: 5 * time.Second})
	if err := d.Abandon(ctx, driver.Holding{Key: key, Owner: o2, TTL: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if got := entries(t, cli, key); len(got) != 0 {
		t.Fatalf("entries after Abandon: %v", got)
	}
	if _, err := d.Extend(ctx, driver.Holding{Key: key, Owner: o2, Handle: g.Handle}, 5*time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Extend after Abandon: %v", err)
	}
	if err := d.Abandon(ctx, driver.Holding{Key: key, Owner: o2, TTL: 5 * time.Second, Handle: g.Handle}); err != nil {
		t.Errorf("second Abandon: %v", err)
	}
}

// TestLapsedWaiterRequeuesAndItsWatchFollows: a waiter whose lease ran out
// (here: revoked) writes its entry anew at the end of the queue with the same
// handle, and its subscription then watches its new predecessor.
func TestLapsedWaiterRequeuesAndItsWatchFollows(t *testing.T) {
	key := testKey(t)
	ctx := ctxT(t, 20*time.Second)
	d, dw, dx := newDriver(t), newDriver(t), newDriver(t)
	a, w, x := owner(), owner(), owner()
	ga := mustGrant(t, d, driver.AcquireRequest{Key: key, Owner: a, TTL: 10 * time.Second})
	rw := driver.AcquireRequest{Key: key, Owner: w, TTL: 10 * time.Second, Waiting: true}
	bw := mustBusy(t, dw, rw)
	rw.Handle = bw.Handle
	wake, cancel, err := dw.Subscribe(ctx, driver.Holding{Key: key, Owner: w, Handle: bw.Handle})
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	_, lease, _ := bw.Handle.(*queueEntry).state()
	if _, err := dw.cli.Revoke(ctx, lease); err != nil {
		t.Fatal(err)
	}
	rx := driver.AcquireRequest{Key: key, Owner: x, TTL: 10 * time.Second, Waiting: true}
	bx := mustBusy(t, dx, rx)
	rx.Handle = bx.Handle
	bw2 := mustBusy(t, dw, rw)
	if bw2.Handle != bw.Handle {
		t.Fatal("the requeued waiter got a new handle")
	}
	if got := entries(t, d.cli, key); len(got) != 3 || got[0] != a || got[1] != x || got[2] != w {
		t.Fatalf("queue %v, want holder, x, w", got)
	}
	if err := d.Release(ctx, driver.Holding{Key: key, Owner: a, Handle: ga.Handle}); err != nil {
		t.Fatal(err)
	}
	gx := mustGrant(t, dx, rx)
	if n := dw.wakes.Load(); n != 0 {
		t.Fatalf("w woken %d times while x is ahead of it", n)
	}
	if err := dx.Release(ctx, driver.Holding{Key: key, Owner: x, Handle: gx.Handle}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
	case <-ctx.Done():
		t.Fatal("w never woken after x released")
	}
	gw := mustGrant(t, dw, rw)
	_ = dw.Release(ctx, driver.Holding{Key: key, Owner: w, Handle: gw.Handle})
}
