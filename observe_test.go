package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/memlock"
)

// recorder is an Observer that writes one line per event.
type recorder struct {
	mu      sync.Mutex
	events  []string
	lost    chan struct{} // closed at the first loss, when not nil
	refused chan struct{} // closed at the first renewal that finds the lock gone, when not nil
}

type ctxKey struct{}

func (r *recorder) add(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, fmt.Sprintf(format, args...))
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ev := r.events
	r.events = nil
	return ev
}

func (r *recorder) AcquireStart(ctx context.Context, e dlock.AcquireStartEvent) context.Context {
	r.add("start %s %s %s %s", e.Key, e.Backend, e.Kind, mode(e.Try))
	return context.WithValue(ctx, ctxKey{}, "acquire:"+e.Key)
}

func (r *recorder) AcquireEnd(ctx context.Context, e dlock.AcquireEndEvent) context.Context {
	r.add("end %s %s %s attempts=%d lease=%t ctx=%v", e.Key, mode(e.Try), acquireOutcome(e.Err), e.Attempts, e.Lease != nil, ctx.Value(ctxKey{}))
	return context.WithValue(ctx, ctxKey{}, "lease:"+e.Key)
}

func (r *recorder) Renewal(ctx context.Context, e dlock.RenewalEvent) {
	r.add("renewal %s %s margin>0=%t ctx=%v", e.Key, renewalOutcome(e.Err), e.Margin > 0, ctx.Value(ctxKey{}))
	if r.refused != nil && errors.Is(e.Err, dlock.ErrNotHeld) {
		close(r.refused)
	}
}

func (r *recorder) Loss(ctx context.Context, e dlock.LossEvent) {
	r.add("loss %s %s lost=%t ctx=%v", e.Key, e.Cause, errors.Is(e.Err, dlock.ErrLockLost), ctx.Value(ctxKey{}))
	if r.lost != nil {
		close(r.lost)
	}
}

func (r *recorder) Release(ctx context.Context, e dlock.ReleaseEvent) {
	r.add("release %s %s ctx=%v", e.Key, releaseOutcome(e.Err), ctx.Value(ctxKey{}))
}

func (r *recorder) Abandon(_ context.Context, t dlock.Target) { r.add("abandon %s", t.Key) }

func (r *recorder) Wake(_ context.Context, t dlock.Target) { r.add("wake %s", t.Key) }

func (r *recorder) Term(_ context.Context, e dlock.LeadershipEvent) {
	r.add("leader %s %t", e.Key, e.Leader)
}

func (r *recorder) StaleToken(ctx context.Context, e dlock.StaleTokenEvent) {
	r.add("stale %s %s token=%d newest=%d ctx=%v", e.Key, e.Resource, e.Token, e.Newest, ctx.Value(ctxKey{}))
}

func wantEvents(t *testing.T, r *recorder, want ...string) {
	t.Helper()
	got := r.take()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestObserverAcquireOutcomes(t *testing.T) {
	store := memlock.NewStore()
	r := &recorder{}
	c, err := memlock.New(store, dlock.WithObserver(r))
	if err != nil {
		t.Fatal(err)
	}
	other, err := memlock.New(store) // a second contender, not observed
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	l, err := c.TryLock(ctx, "jobs:1")
	if err != nil {
		t.Fatal(err)
	}
	wantEvents(t, r, "start jobs:1 memlock mutex try", "end jobs:1 try acquired attempts=1 lease=true ctx=acquire:jobs:1")
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wantEvents(t, r, "release jobs:1 ok ctx=lease:jobs:1")
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatal(err)
	}
	wantEvents(t, r) // a second Unlock is no release

	held, err := other.TryLock(ctx, "jobs:1")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock(ctx)
	if _, err := c.TryLock(ctx, "jobs:1"); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatal(err)
	}
	wantEvents(t, r, "start jobs:1 memlock mutex try", "end jobs:1 try busy attempts=1 lease=false ctx=acquire:jobs:1")

	if _, err := c.Lock(ctx, "jobs:1", dlock.WithWait(30*time.Millisecond), dlock.WithRetry(dlock.FixedBackoff(10*time.Millisecond))); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
	ev := r.take()
	if len(ev) != 2 || ev[0] != "start jobs:1 memlock mutex wait" || !strings.HasPrefix(ev[1], "end jobs:1 wait timeout attempts=") {
		t.Fatalf("timed-out wait: %q", ev)
	}

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.Lock(cctx, "jobs:1"); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	wantEvents(t, r, "start jobs:1 memlock mutex wait", "end jobs:1 wait canceled attempts=0 lease=false ctx=acquire:jobs:1")

	if _, err := c.TryLock(ctx, "bad\nkey"); !errors.Is(err, dlock.ErrInvalid) {
		t.Fatal(err)
	}
	wantEvents(t, r, "start bad\nkey memlock mutex try", "end bad\nkey try invalid attempts=0 lease=false ctx=acquire:bad\nkey")

	// WithObserver(nil) switches the Client's default off for one call.
	if _, err := c.TryLock(ctx, "jobs:1", dlock.WithObserver(nil)); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatal(err)
	}
	wantEvents(t, r)
}

// subscribing is a memlock Store that says when a waiter subscribes, and names
// its kind and backend.
type subscribing struct {
	*memlock.Store
	subscribed chan struct{}
}

func (s subscribing) Subscribe(ctx context.Context, h driver.Holding) (<-chan struct{}, func(), error) {
	defer close(s.subscribed)
	return s.Store.Subscribe(ctx, h)
}

func (subscribing) Info() driver.DriverInfo {
	return driver.DriverInfo{Backend: "mem", Kind: driver.KindFair}
}

func TestObserverWaitWakesAndAcquires(t *testing.T) {
	store := memlock.NewStore()
	r := &recorder{}
	d := subscribing{store, make(chan struct{})}
	c, err := dlock.NewClient(d, dlock.WithObserver(r))
	if err != nil {
		t.Fatal(err)
	}
	other, _ := memlock.New(store)
	ctx := context.Background()
	held, err := other.TryLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := c.Lock(ctx, "k", dlock.WithWait(10*time.Second))
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	<-d.subscribed
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	wantEvents(t, r, "start k mem fair wait", "wake k", "end k wait acquired attempts=2 lease=true ctx=acquire:k", "release k ok ctx=lease:k")
}

func TestObserverRenewalAndLoss(t *testing.T) {
	store := memlock.NewStore()
	r := &recorder{lost: make(chan struct{}), refused: make(chan struct{})}
	c, _ := memlock.New(store, dlock.WithObserver(r))
	ctx := context.Background()
	l, err := c.TryLock(ctx, "k", dlock.WithTTL(300*time.Millisecond), dlock.WithAutoRenew(true), dlock.WithRenewEvery(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	r.take()
	// Removed behind the lease's back (a release under its owner, which
	// tells nobody, unlike ForceUnlock): the next renewal finds the lock gone.
	if err := store.Release(ctx, driver.Holding{Key: "k", Owner: l.Owner()}); err != nil {
		t.Fatal(err)
	}
	<-r.lost
	<-r.refused
	ev := strings.Join(r.take(), "\n")
	if !strings.Contains(ev, "loss k not_held lost=true ctx=lease:k") || !strings.Contains(ev, "renewal k not_held") {
		t.Fatalf("events:\n%s", ev)
	}
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatal(err)
	}
	wantEvents(t, r) // the loss ended the lease: no release

	// A fixed lease is lost at its TTL.
	r.mu.Lock()
	r.lost, r.refused = make(chan struct{}), nil
	r.mu.Unlock()
	l, err = c.TryLock(ctx, "fixed", dlock.WithTTL(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	<-r.lost
	ev = strings.Join(r.take(), "\n")
	if !strings.Contains(ev, "loss fixed fixed_ttl lost=true") {
		t.Fatalf("events:\n%s", ev)
	}
	_ = l.Unlock(ctx)
}

func TestObserverRenewalOK(t *testing.T) {
	store := memlock.NewStore()
	renewed := make(chan dlock.RenewalEvent, 1)
	c, _ := memlock.New(store, dlock.WithObserver(renewalObserver(renewed)))
	ctx := context.Background()
	l, err := c.TryLock(ctx, "k", dlock.WithTTL(300*time.Millisecond), dlock.WithAutoRenew(true), dlock.WithRenewEvery(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	e := <-renewed
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if e.Err != nil || e.Margin <= 0 || e.Margin > 300*time.Millisecond || e.Backend != "memlock" {
		t.Fatalf("renewal %+v", e)
	}
}

type renewalObserver chan dlock.RenewalEvent

func (o renewalObserver) Renewal(_ context.Context, e dlock.RenewalEvent) {
	select {
	case o <- e:
	default:
	}
}

func (renewalObserver) AcquireStart(ctx context.Context, _ dlock.AcquireStartEvent) context.Context {
	return ctx
}
func (renewalObserver) AcquireEnd(ctx context.Context, _ dlock.AcquireEndEvent) context.Context {
	return ctx
}
func (renewalObserver) Loss(context.Context, dlock.LossEvent)             {}
func (renewalObserver) Release(context.Context, dlock.ReleaseEvent)       {}
func (renewalObserver) Abandon(context.Context, dlock.Target)             {}
func (renewalObserver) Wake(context.Context, dlock.Target)                {}
func (renewalObserver) Term(context.Context, dlock.LeadershipEvent)       {}
func (renewalObserver) StaleToken(context.Context, dlock.StaleTokenEvent) {}

// TestReportStaleToken: a fence helper's refusal reaches the Observer of the
// lease whose token it refused, with the lease's context; other tokens and
// leases without an Observer are ignored.
func TestReportStaleToken(t *testing.T) {
	r := &recorder{}
	store := memlock.NewStore()
	c, _ := memlock.New(store, dlock.WithObserver(r))
	plain, _ := memlock.New(store)
	ctx := context.Background()
	l, err := c.TryLock(ctx, "orders:1")
	if err != nil {
		t.Fatal(err)
	}
	r.take()
	dlock.ReportStaleToken(l, "orders:1:row", l.Token()+3)
	wantEvents(t, r, fmt.Sprintf("stale orders:1 orders:1:row token=%d newest=%d ctx=lease:orders:1", l.Token(), l.Token()+3))
	u, err := plain.TryLock(ctx, "orders:2")
	if err != nil {
		t.Fatal(err)
	}
	var none *dlock.Lease
	for _, tok := range []any{u, none, nil, "not a lease"} {
		dlock.ReportStaleToken(tok, "r", 1)
	}
	wantEvents(t, r)
}

func TestObserverLeadership(t *testing.T) {
	r := &recorder{}
	c, _ := memlock.New(memlock.NewStore(), dlock.WithObserver(r))
	ctx := context.Background()
	ld, err := dlock.Campaign(ctx, c, "scheduler")
	if err != nil {
		t.Fatal(err)
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	ev := r.take()
	if len(ev) != 5 || ev[2] != "leader scheduler true" || ev[3] != "release scheduler ok ctx=lease:scheduler" || ev[4] != "leader scheduler false" {
		t.Fatalf("events: %q", ev)
	}
}

// The hook costs nothing when unset: compare
//
//	go test -run '^$' -bench BenchmarkObserver -benchmem .
func BenchmarkObserverUncontended(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts []dlock.Option
	}{
		{"none", nil},
		{"nop", []dlock.Option{dlock.WithObserver(dlock.NopObserver{})}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c, err := memlock.New(memlock.NewStore(), bc.opts...)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				l, err := c.TryLock(ctx, "bench")
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// named is a memlock Store that names itself info.
type named struct {
	*memlock.Store
	info driver.DriverInfo
}

func (n named) Info() driver.DriverInfo { return n.info }

// TestNewClientChecksDriverInfo: a driver must name its backend and kind; the
// Observer's events carry the names it gives.
func TestNewClientChecksDriverInfo(t *testing.T) {
	for _, bad := range []driver.DriverInfo{{}, {Backend: "mem"}, {Kind: driver.KindMutex}, {Backend: "Mem", Kind: driver.KindMutex},
		{Backend: "mem", Kind: "a kind"}, {Backend: strings.Repeat("m", 65), Kind: driver.KindMutex}} {
		if _, err := dlock.NewClient(named{memlock.NewStore(), bad}); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("NewClient with names %+v: %v, want ErrInvalid", bad, err)
		}
	}
	r := &recorder{}
	c, err := dlock.NewClient(named{memlock.NewStore(), driver.DriverInfo{Backend: "my-store.v2", Kind: driver.KindSemaphore}}, dlock.WithObserver(r))
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.TryLock(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(context.Background())
	if ev := r.take(); len(ev) == 0 || ev[0] != "start k my-store.v2 semaphore try" {
		t.Fatalf("events %q, want the driver's names in the first", ev)
	}
}

// mode names an acquisition's mode as the recorder writes it.
func mode(try bool) string {
	if try {
		return "try"
	}
	return "wait"
}

// acquireOutcome names how an acquisition that returned err ended.
func acquireOutcome(err error) string {
	switch {
	case err == nil:
		return "acquired"
	case errors.Is(err, dlock.ErrInvalid), errors.Is(err, dlock.ErrConflict):
		return "invalid"
	case errors.Is(err, dlock.ErrRefused):
		return "refused"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, dlock.ErrNotObtained):
		return "busy"
	}
	return "unavailable"
}

// renewalOutcome names how a renewal that returned err ended.
func renewalOutcome(err error) string { return heldOutcome(err, "transient") }

// releaseOutcome names how an Unlock that returned err ended.
func releaseOutcome(err error) string { return heldOutcome(err, "error") }

// heldOutcome names how an operation on a held lock that returned err ended:
// ok, not_held, or failed when the error is another.
func heldOutcome(err error, failed string) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, dlock.ErrNotHeld):
		return "not_held"
	}
	return failed
}
