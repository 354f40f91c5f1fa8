package dashboard_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dashboard"
	"github.com/dlock-go/dlock/memlock"
)

// runMeta is metadata as "dlock run" writes it.
func runMeta(t testing.TB, host string, pid int, desc string) string {
	t.Helper()
	js, err := json.Marshal(map[string]any{"host": host, "pid": pid, "user": "ops", "since": time.Now().UTC(), "description": desc})
	if err != nil {
		t.Fatal(err)
	}
	return string(js)
}

func newClient(t testing.TB, st *memlock.Store) *dlock.Client {
	t.Helper()
	c, err := memlock.New(st)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func rowOf(t testing.TB, s dashboard.Snapshot, key string) dashboard.Row {
	t.Helper()
	for _, r := range s.Rows {
		if r.Key == key {
			return r
		}
	}
	t.Fatalf("no row %q in %+v", key, s.Rows)
	return dashboard.Row{}
}

func TestWatcherRows(t *testing.T) {
	ctx := context.Background()
	st := memlock.NewStore()
	a, b := newClient(t, st), newClient(t, st)
	hostile := "x\x1b[2J\n| forged | row |\u202e\xff"
	la, err := a.TryLock(ctx, "jobs:report", dlock.WithMetadata(runMeta(t, "web-1", 4242, "nightly report")))
	if err != nil {
		t.Fatal(err)
	}
	defer la.Unlock(ctx)
	lb, err := b.TryLock(ctx, "jobs:evil", dlock.WithMetadata(hostile))
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Unlock(ctx)
	other, err := b.TryLock(ctx, "other", dlock.WithOwner("worker-7"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Unlock(ctx)

	w, err := dashboard.NewWatcher(st, dashboard.Options{Pattern: "jobs:*"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := w.Refresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Rows) != 2 || s.Held != 2 || s.Pattern != "jobs:*" {
		t.Fatalf("rows %+v held %d: want jobs:evil and jobs:report", s.Rows, s.Held)
	}
	r := rowOf(t, s, "jobs:report")
	if r.Kind != "mutex" || r.Host != "web-1" || r.PID != 4242 || r.Description != "nightly report" || r.Holders != 1 || r.Limit != 1 {
		t.Errorf("row %+v: want a mutex held by web-1 pid 4242", r)
	}
	if r.Holder != `ops@web-1 pid 4242 "nightly report"` {
		t.Errorf("holder %q", r.Holder)
	}
	if r.TTL <= 0 || r.TTL > dlock.DefaultTTL || r.TTLMax < r.TTL || r.TTLLow || r.Vanished {
		t.Errorf("ttl %v of %v low %v vanished %v", r.TTL, r.TTLMax, r.TTLLow, r.Vanished)
	}
	if r.Owner != la.Owner() || r.SinceSeen || r.HeldFor < 0 || r.HeldFor > time.Minute {
		t.Errorf("owner %q since %v (seen %v) held %v", r.Owner, r.Since, r.SinceSeen, r.HeldFor)
	}
	e := rowOf(t, s, "jobs:evil")
	for _, f := range []string{e.Metadata, e.Holder} {
		if strings.ContainsAny(f, "\x1b\n\u202e") || !strings.Contains(f, `\x1b[2J\n| forged`) || !strings.Contains(f, `\u202e\xff`) {
			t.Errorf("hostile metadata not escaped: %q", f)
		}
	}
	if !e.SinceSeen {
		t.Errorf("a holder without a start time is timed from the first sight")
	}

	// The owner ID names a holder without metadata.
	w2, err := dashboard.NewWatcher(st, dashboard.Options{Pattern: "other"})
	if err != nil {
		t.Fatal(err)
	}
	s2, _ := w2.Refresh(ctx)
	if o := rowOf(t, s2, "other"); o.OwnerID != "worker-7" || o.Holder != "worker-7" {
		t.Errorf("owner ID row %+v", o)
	}
}

func TestWatcherRateAndFree(t *testing.T) {
	ctx := context.Background()
	st := memlock.NewStore()
	a, b := newClient(t, st), newClient(t, st)
	w, err := dashboard.NewWatcher(st, dashboard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	hold := func(c *dlock.Client) *dlock.Lease {
		t.Helper()
		l, err := c.TryLock(ctx, "busy")
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	l := hold(a)
	if _, err := w.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	// Five acquisitions by two processes, each seen by a read. memlock's
	// tokens are clock readings (as Redis's): acquisitions between two reads
	// count once.
	var s dashboard.Snapshot
	for i := 0; i < 5; i++ {
		l.Unlock(ctx)
		if i%2 == 0 {
			l = hold(b)
		} else {
			l = hold(a)
		}
		if s, err = w.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
	}
	r := rowOf(t, s, "busy")
	if want := 5 / dashboard.RateWindow.Seconds(); r.Rate != want {
		t.Errorf("rate %v, want %v (5 acquisitions in the window)", r.Rate, want)
	}
	if len(s.Totals) == 0 || s.Totals[len(s.Totals)-1].Rate <= 0 || s.Totals[len(s.Totals)-1].Held != 1 {
		t.Errorf("totals %+v: want the acquisitions and one lock held in the last point", s.Totals[len(s.Totals)-1:])
	}
	h := w.History("busy")
	if len(h) == 0 || h[len(h)-1].Rate <= 0 {
		t.Errorf("history %+v: want the acquisitions in the last point", h)
	}
	if w.History("nothing") != nil {
		t.Errorf("a lock never seen has a history")
	}

	// Released: the row stays, free, without holder.
	l.Unlock(ctx)
	s, _ = w.Refresh(ctx)
	r = rowOf(t, s, "busy")
	if r.Held || r.Holder != "free" || r.Owner != "" || s.Held != 0 {
		t.Errorf("released lock row %+v", r)
	}
}

// holdAndWatch takes key with opts in a memlock Store, and returns a Watcher
// of the store reading as often as allowed.
func holdAndWatch(t *testing.T, key string, opts ...dlock.Option) *dashboard.Watcher {
	t.Helper()
	st := memlock.NewStore()
	l, err := newClient(t, st).TryLock(context.Background(), key, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Unlock(context.Background()) })
	w, err := dashboard.NewWatcher(st, dashboard.Options{Interval: dashboard.MinInterval})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestWatcherVanishedHolder(t *testing.T) {
	ctx := context.Background()
	// A holder that never renews (a fixed TTL, as a process gone would leave it).
	w := holdAndWatch(t, "stuck", dlock.WithTTL(1500*time.Millisecond))
	s, _ := w.Refresh(ctx)
	if r := rowOf(t, s, "stuck"); r.Vanished || r.TTLLow {
		t.Fatalf("fresh holding marked: %+v", r)
	}
	var r dashboard.Row
	deadline := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(deadline) {
		s, _ = w.Refresh(ctx)
		if r = rowOf(t, s, "stuck"); r.Vanished && r.TTLLow {
			break
		}
		time.Sleep(50 * time.Millisecond) // polling the expiry of a lease: time is what is awaited
	}
	if !r.Vanished || !r.TTLLow {
		t.Fatalf("holding not renewed for %v of %v: row %+v, want vanished and TTL low", time.Since(r.Since), r.TTLMax, r)
	}
}

// A renewing holder is never marked vanished.
func TestWatcherRenewingHolder(t *testing.T) {
	ctx := context.Background()
	w := holdAndWatch(t, "alive", dlock.WithTTL(900*time.Millisecond), dlock.WithAutoRenew(true))
	end := time.Now().Add(2 * time.Second)
	for time.Now().Before(end) {
		s, _ := w.Refresh(ctx)
		if r := rowOf(t, s, "alive"); r.Vanished {
			t.Fatalf("renewing holder marked vanished: %+v", r)
		}
		time.Sleep(100 * time.Millisecond) // sampling over several renewals
	}
}

func TestWatcherErrors(t *testing.T) {
	st := memlock.NewStore()
	if _, err := dashboard.NewWatcher(st, dashboard.Options{Pattern: "a{b"}); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("bad pattern: %v, want ErrInvalid", err)
	}
	if _, err := dashboard.NewWatcher(nil, dashboard.Options{}); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("nil inspector: %v, want ErrInvalid", err)
	}
	if _, err := dashboard.NewWatcher(st, dashboard.Options{Interval: time.Millisecond}); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("1ms interval: %v, want ErrInvalid", err)
	}
	if _, err := dashboard.ParseSortBy("size"); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("unknown order: %v, want ErrInvalid", err)
	}
}

func TestSort(t *testing.T) {
	rows := []dashboard.Row{
		{Key: "a", Held: true, Waiters: 1, HeldFor: time.Second, Rate: 3},
		{Key: "b", Held: true, Waiters: 5, HeldFor: time.Hour, Rate: 0},
		{Key: "c", Held: false},
		{Key: "d", Held: true, Waiters: 0, HeldFor: time.Minute, Rate: 9},
	}
	for by, want := range map[dashboard.SortBy]string{
		dashboard.SortKey: "abdc", dashboard.SortWaiters: "badc", dashboard.SortAge: "bdac", dashboard.SortChurn: "dabc",
	} {
		dashboard.Sort(rows, by)
		got := ""
		for _, r := range rows {
			got += r.Key
		}
		if got != want {
			t.Errorf("sort by %s: %s, want %s", by, got, want)
		}
	}
}

func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"plain text, ünïcode": "plain text, ünïcode",
		"a\x1b[31mred\n":      `a\x1b[31mred\n`,
		"\u009b2J\u202e":      `\u009b2J\u202e`,
		"bad \xff byte":       `bad \xff byte`,
	} {
		if got := dashboard.Printable(in); got != want {
			t.Errorf("Printable(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestDelayedLockKind: a lock in its lock-delay, which the store reports with
// no kind, shows the kind Options.DelayedKind names (dlock serve, top and list
// pass their backend's plain kind), and "lock" without one.
func TestDelayedLockKind(t *testing.T) {
	ctx := context.Background()
	st := memlock.NewStore()
	l, err := newClient(t, st).TryLock(ctx, "delayed", dlock.WithLockDelay(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.ForceUnlock(ctx, "delayed"); err != nil {
		t.Fatal(err)
	}
	<-l.Done()
	for _, tc := range []struct{ kind, want string }{{"mutex", "mutex"}, {"", "lock"}} {
		w, err := dashboard.NewWatcher(st, dashboard.Options{DelayedKind: tc.kind})
		if err != nil {
			t.Fatal(err)
		}
		s, err := w.Refresh(ctx)
		if err != nil {
			t.Fatal(err)
		}
		r := rowOf(t, s, "delayed")
		if r.Held || r.DelayMS <= 0 || r.Kind != tc.want {
			t.Errorf("DelayedKind %q: row %+v, want a free row in its lock-delay of kind %q", tc.kind, r, tc.want)
		}
	}
}
