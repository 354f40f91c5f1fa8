// Package dlocktest is the conformance suite every dlock backend runs against
// itself, on a real server: mutual exclusion under contention across goroutines and
// client connections, ownership checks, expiry, extension, TTL, fencing-token
// monotonicity, waiting, cancellation, loss notification, renewal, lock-delay, and bad input.
//
//	func TestConformance(t *testing.T) {
//		dlocktest.Run(t, dlocktest.Backend{New: func(t testing.TB, opts ...dlock.Option) dlock.Locker { ... }})
//	}
package dlocktest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"math"
	mrand "math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"golang.org/x/sync/errgroup"
)

// Backend describes the backend under test.
type Backend struct {
	// New returns a Locker with its own connection(s) to the server under test,
	// with opts as its defaults. It is called several times per test to get
	// independent clients; their connections must be closed by t.Cleanup.
	New func(t testing.TB, opts ...dlock.Option) dlock.Locker

	// Occupy, when set, stores data that is not a lock where the lock named key
	// would live, and returns a function that reports whether that data is still
	// intact. It is used to check that foreign data is reported with
	// dlock.ErrConflict and never touched.
	Occupy func(t testing.TB, key string) (intact func() bool)

	// Skip names subtests that cannot apply to the backend, each with the reason
	// it gives when skipped (for example a storage format that cannot express
	// what the subtest checks). "Once/the result lives its TTL" names the one
	// nested subtest that can be skipped (a store whose expiry counts whole
	// seconds).
	Skip map[string]string

	// Info, when set, is what the driver must name itself (driver.Driver.Info).
	// Whether set or not, the suite checks that the Locker's driver gives well
	// formed names, and that its Observer events carry them.
	Info driver.DriverInfo
}

// Run runs the whole suite as subtests of t.
func Run(t *testing.T, b Backend) {
	if b.New == nil {
		t.Fatal("dlocktest: Backend.New is nil")
	}
	tests := []struct {
		name string
		fn   func(*testing.T, Backend)
	}{
		{"TryLockIsExclusive", testTryLockIsExclusive},
		{"MutualExclusionUnderContention", testMutualExclusion},
		{"TokensStrictlyIncrease", testTokensIncrease},
		{"UnlockTwice", testUnlockTwice},
		{"UnlockAfterExpiryTouchesNothing", testUnlockAfterExpiry},
		{"ExpiryFreesLockAfterHolderWasTold", testExpiryFrees},
		{"ExtendKeepsLock", testExtend},
		{"TTLReportsServerTime", testTTL},
		{"WaitTimeout", testWaitTimeout},
		{"ContextCancelWhileWaiting", testCancelWhileWaiting},
		{"CancelAtRandomPointsLeavesNoLock", testCancelRandom},
		{"AutoRenewKeepsLockPastTTL", testAutoRenew},
		{"MaxHoldCapsRenewal", testMaxHold},
		{"DoRunsUnderLockAndReleases", testDo},
		{"BadInput", testBadInput},
		{"ForeignDataIsConflict", testConflict},
		{"InspectorShowsAndForcesLocks", testInspector},
		{"DriverNamesBackendAndKind", testDriverInfo},
		{"LockDelay", testDelay},
		{"DetachAndResume", testDetachResume},
		{"Once", testOnce},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if why, ok := b.Skip[tc.name]; ok {
				t.Skip(why)
			}
			tc.fn(t, b)
		})
	}
}

// Key returns a lock key unique to this test run.
func Key(t testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", ".", " ", "_", "{", "(", "}", ")").Replace(t.Name())
	return "dlocktest." + name + "." + hex.EncodeToString(b[:])
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func mustLock(t testing.TB, l dlock.Locker, key string, opts ...dlock.Option) *dlock.Lease {
	t.Helper()
	// A lease of a few tens of milliseconds can be granted after its validity
	// on a loaded machine (ErrUnavailable, nothing left behind): the set-up tries
	// again, a few times.
	var err error
	for range 3 {
		var lease *dlock.Lease
		if lease, err = l.TryLock(ctxT(t, 10*time.Second), key, opts...); err == nil {
			return lease
		}
		if !errors.Is(err, dlock.ErrUnavailable) || errors.Is(err, dlock.ErrRefused) {
			break
		}
	}
	t.Fatalf("TryLock(%q): %v", key, err)
	return nil
}

func unlock(t testing.TB, l *dlock.Lease) {
	t.Helper()
	if err := l.Unlock(ctxT(t, 10*time.Second)); err != nil {
		t.Fatalf("Unlock(%q): %v", l.Key(), err)
	}
}

func testTryLockIsExclusive(t *testing.T, b Backend) {
	a, c := b.New(t), b.New(t)
	key := Key(t)
	la := mustLock(t, a, key, dlock.WithTTL(10*time.Second))
	if la.Key() != key || la.Token() == 0 || len(la.Owner()) != 32 {
		t.Fatalf("lease key %q token %d owner %q", la.Key(), la.Token(), la.Owner())
	}
	_, err := c.TryLock(ctxT(t, 5*time.Second), key)
	var busy *dlock.BusyError
	if !errors.Is(err, dlock.ErrNotObtained) || !errors.As(err, &busy) {
		t.Fatalf("second TryLock: got %v, want ErrNotObtained", err)
	}
	if busy.Remaining <= 0 || busy.Remaining > 10*time.Second {
		t.Errorf("busy remaining %v, want in (0, 10s]", busy.Remaining)
	}
	if _, err := a.TryLock(ctxT(t, 5*time.Second), key); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("same client, second TryLock: got %v, want ErrNotObtained (not reentrant)", err)
	}
	unlock(t, la)
	lc := mustLock(t, c, key)
	if lc.Token() <= la.Token() {
		t.Errorf("token after hand-over %d not above %d", lc.Token(), la.Token())
	}
	unlock(t, lc)
}

func testMutualExclusion(t *testing.T, b Backend) {
	const clients, goroutines, rounds = 3, 4, 12
	key := Key(t)
	var inside atomic.Int32
	var mu sync.Mutex
	var lastToken uint64
	var total int
	ctx := ctxT(t, 60*time.Second)
	g, gctx := errgroup.WithContext(ctx)
	for c := 0; c < clients; c++ {
		l := b.New(t, dlock.WithRetry(dlock.ExponentialBackoff(time.Millisecond, 20*time.Millisecond)))
		for i := 0; i < goroutines; i++ {
			g.Go(func() error {
				for r := 0; r < rounds; r++ {
					lease, err := l.Lock(gctx, key)
					if err != nil {
						return err
					}
					if !inside.CompareAndSwap(0, 1) {
						return errors.New("two holders inside the critical section")
					}
					mu.Lock()
					if lease.Token() <= lastToken {
						mu.Unlock()
						return errors.New("fencing token did not increase")
					}
					lastToken = lease.Token()
					total++
					mu.Unlock()
					inside.Store(0)
					if err := lease.Unlock(gctx); err != nil {
						return err
					}
				}
				return nil
			})
		}
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if total != clients*goroutines*rounds {
		t.Fatalf("critical sections %d, want %d", total, clients*goroutines*rounds)
	}
}

func testTokensIncrease(t *testing.T, b Backend) {
	key := Key(t)
	ls := []dlock.Locker{b.New(t), b.New(t)}
	var last uint64
	for i := 0; i < 20; i++ {
		l := mustLock(t, ls[i%2], key, dlock.WithTTL(5*time.Second))
		if l.Token() <= last {
			t.Fatalf("acquisition %d: token %d not above %d", i, l.Token(), last)
		}
		last = l.Token()
		unlock(t, l)
	}
}

func testUnlockTwice(t *testing.T, b Backend) {
	l := mustLock(t, b.New(t), Key(t))
	unlock(t, l)
	ctx := ctxT(t, 5*time.Second)
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("second Unlock: %v, want ErrNotHeld", err)
	}
	if err := l.Extend(ctx, time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Extend after Unlock: %v, want ErrNotHeld", err)
	}
	if _, err := l.TTL(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("TTL after Unlock: %v, want ErrNotHeld", err)
	}
	if !errors.Is(l.Err(), dlock.ErrReleased) {
		t.Errorf("Err after Unlock: %v, want ErrReleased", l.Err())
	}
	var nilLease *dlock.Lease
	if err := nilLease.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("nil lease Unlock: %v", err)
	}
	<-nilLease.Done()
}

// expire takes key with a short fixed TTL and returns the lease once its loss has
// been signalled and another client has taken and released the key, so that the
// key is gone on the server.
func expire(t *testing.T, b Backend, key string) *dlock.Lease {
	t.Helper()
	la := mustLock(t, b.New(t), key, dlock.WithTTL(60*time.Millisecond))
	select {
	case <-la.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed 10s after a 60ms lease")
	}
	if !errors.Is(la.Err(), dlock.ErrLockLost) || !errors.Is(la.Err(), dlock.ErrNotHeld) {
		t.Fatalf("Err after expiry: %v, want ErrLockLost", la.Err())
	}
	return la
}

func testUnlockAfterExpiry(t *testing.T, b Backend) {
	key := Key(t)
	la := expire(t, b, key)
	other := b.New(t)
	lb, err := other.Lock(ctxT(t, 10*time.Second), key, dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatalf("Lock after expiry: %v", err)
	}
	ctx := ctxT(t, 5*time.Second)
	if err := la.Extend(ctx, time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("stale Extend: %v, want ErrNotHeld", err)
	}
	if err := la.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("stale Unlock: %v, want ErrNotHeld", err)
	}
	// The new holder's lock is untouched.
	if ttl, err := lb.TTL(ctx); err != nil || ttl < 5*time.Second {
		t.Fatalf("new holder TTL after stale Unlock/Extend: %v, %v", ttl, err)
	}
	if _, err := b.New(t).TryLock(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock while the new holder holds: %v", err)
	}
	unlock(t, lb)
	// Unlock of an expired lock nobody holds: not held, and nothing re-created.
	lc := expire(t, b, key)
	if err := lc.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Unlock after expiry: %v, want ErrNotHeld", err)
	}
	l := mustLock(t, other, key)
	unlock(t, l)
}

func testExpiryFrees(t *testing.T, b Backend) {
	key := Key(t)
	const ttl = 150 * time.Millisecond
	la := mustLock(t, b.New(t), key, dlock.WithTTL(ttl))
	start := time.Now()
	lb, err := b.New(t).Lock(ctxT(t, 10*time.Second), key, dlock.WithWait(5*time.Second))
	got := time.Now()
	if err != nil {
		t.Fatalf("Lock after expiry: %v", err)
	}
	defer unlock(t, lb)
	if d := la.Deadline(); d.After(got) {
		t.Errorf("holder deadline %v after the next acquisition", d.Sub(got))
	}
	// The holder releases the lock when its local deadline passes, so the next
	// holder may come a little before the server's expiry; never before the
	// holder's deadline (checked above).
	if el := got.Sub(start); el < ttl/2 {
		t.Errorf("acquired %v after a %v lease was taken", el, ttl)
	}
	select {
	case <-la.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("holder never told of the loss")
	}
	if !errors.Is(la.Err(), dlock.ErrLockLost) {
		t.Errorf("holder Err %v, want ErrLockLost", la.Err())
	}
}

func testExtend(t *testing.T, b Backend) {
	key := Key(t)
	l := b.New(t)
	la := mustLock(t, l, key, dlock.WithTTL(time.Second))
	d0 := la.Deadline()
	ctx := ctxT(t, 5*time.Second)
	if err := la.Extend(ctx, 20*time.Second); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if !la.Deadline().After(d0.Add(10 * time.Second)) {
		t.Errorf("deadline not moved by Extend")
	}
	ttl, err := la.TTL(ctx)
	if err != nil || ttl <= 15*time.Second || ttl > 20*time.Second {
		t.Fatalf("TTL after Extend(20s): %v, %v", ttl, err)
	}
	_, err = b.New(t).TryLock(ctx, key)
	var busy *dlock.BusyError
	if !errors.As(err, &busy) || busy.Remaining <= 15*time.Second {
		t.Fatalf("TryLock of extended lock: %v", err)
	}
	for _, bad := range []time.Duration{0, -time.Second, 500 * time.Microsecond, dlock.MaxTTL + 1} {
		if roundedUp(l, bad) {
			continue
		}
		if err := la.Extend(ctx, bad); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("Extend(%v): %v, want ErrInvalid", bad, err)
		}
	}
	if la.Err() != nil {
		t.Fatalf("lease ended by bad Extend: %v", la.Err())
	}
	unlock(t, la)
}

func testTTL(t *testing.T, b Backend) {
	la := mustLock(t, b.New(t), Key(t), dlock.WithTTL(10*time.Second))
	ttl, err := la.TTL(ctxT(t, 5*time.Second))
	if err != nil || ttl <= 9*time.Second || ttl > 10*time.Second {
		t.Fatalf("TTL: %v, %v; want in (9s, 10s]", ttl, err)
	}
	unlock(t, la)
}

func testWaitTimeout(t *testing.T, b Backend) {
	key := Key(t)
	la := mustLock(t, b.New(t), key, dlock.WithTTL(20*time.Second))
	defer unlock(t, la)
	l := b.New(t)
	start := time.Now()
	_, err := l.Lock(ctxT(t, 10*time.Second), key, dlock.WithWait(150*time.Millisecond))
	el := time.Since(start)
	if !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("Lock with wait: %v, want ErrNotObtained", err)
	}
	if el < 150*time.Millisecond || el > 5*time.Second {
		t.Errorf("Lock with 150ms wait returned after %v", el)
	}
	if _, err := l.Lock(ctxT(t, 10*time.Second), key, dlock.WithWait(0)); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("Lock with zero wait: %v", err)
	}
	// Three attempts, or the context (a backend with reliable notifications may
	// sleep long between attempts): either way not obtained.
	_, err = l.Lock(ctxT(t, 2*time.Second), key, dlock.WithRetry(dlock.LimitAttempts(dlock.FixedBackoff(time.Millisecond), 3)))
	if !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("Lock with 3 attempts: %v", err)
	}
}

func testCancelWhileWaiting(t *testing.T, b Backend) {
	key := Key(t)
	la := mustLock(t, b.New(t), key, dlock.WithTTL(20*time.Second))
	defer unlock(t, la)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := b.New(t).Lock(ctx, key)
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Lock: %v, want ErrNotObtained and context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("cancelled Lock did not return")
	}
}

func testCancelRandom(t *testing.T, b Backend) {
	key := Key(t)
	l, probe := b.New(t), b.New(t)
	const ttl = time.Second
	var got, leftover int
	for i := 0; i < 40; i++ {
		d := time.Duration(mrand.N(800)) * time.Microsecond
		ctx, cancel := context.WithTimeout(context.Background(), d)
		lease, err := l.Lock(ctx, key, dlock.WithTTL(ttl))
		cancel()
		if err == nil {
			got++
			unlock(t, lease)
		} else if !errors.Is(err, dlock.ErrNotObtained) && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("cancelled Lock: unexpected error %v", err)
		}
		// No lock may stay behind beyond its TTL; normally clean-up removed it at once.
		p, err := probe.TryLock(ctxT(t, 5*time.Second), key)
		if err != nil {
			leftover++
			p, err = probe.Lock(ctxT(t, 5*time.Second), key, dlock.WithWait(ttl+time.Second))
			if err != nil {
				t.Fatalf("lock left behind beyond its TTL after a cancelled Lock: %v", err)
			}
		}
		unlock(t, p)
	}
	t.Logf("40 cancelled acquisitions: %d succeeded, %d left a key until its TTL", got, leftover)
}

func testAutoRenew(t *testing.T, b Backend) {
	key := Key(t)
	// The TTL leaves room for a renewal round trip on a loaded machine running
	// the race detector (a Cluster's renewals, with other suites running, have
	// taken over 150 ms there, and a fair lock's over 400 ms at a load of 11).
	const ttl = time.Second
	la := mustLock(t, b.New(t), key, dlock.WithTTL(ttl), dlock.WithAutoRenew(true))
	other := b.New(t)
	ctx := ctxT(t, 10*time.Second)
	start := time.Now()
	end := start.Add(3 * ttl)
	for n := 0; time.Now().Before(end); n++ {
		if _, err := other.TryLock(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
			// Distinguish a renewal that fell behind (the holder was told) from
			// two holders at once.
			told := la.Err() != nil || !time.Now().Before(la.Deadline())
			t.Fatalf("TryLock %v into a renewed %v lease: %v (holder told of a loss: %v)", time.Since(start), ttl, err, told)
		}
		select {
		case <-la.Done():
			t.Fatalf("renewed lease lost: %v", la.Err())
		case <-time.After(ttl / 4):
		}
	}
	unlock(t, la)
	l := mustLock(t, other, key)
	unlock(t, l)
}

func testMaxHold(t *testing.T, b Backend) {
	l := b.New(t)
	// 1 s leases (room for renewals on a loaded machine running the race
	// detector: a Sentinel's with 400 ms leases ended early), or the backend's
	// shortest; a cap of three of them, so that renewals happen before it.
	ttl := scaled(l, time.Second)
	hold := 3 * ttl
	start := time.Now()
	la := mustLock(t, l, Key(t), dlock.WithTTL(ttl), dlock.WithAutoRenew(true), dlock.WithMaxHold(hold))
	select {
	case <-la.Done():
	case <-time.After(10*time.Second + 2*hold):
		t.Fatal("lease with MaxHold never ended")
	}
	if el := time.Since(start); el < hold-ttl {
		t.Errorf("lease with MaxHold %v ended after %v", hold, el)
	}
	if !errors.Is(la.Err(), dlock.ErrLockLost) {
		t.Errorf("Err: %v", la.Err())
	}
	if err := la.Unlock(ctxT(t, 5*time.Second)); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Unlock after MaxHold: %v, want ErrNotHeld", err)
	}
}

func testDo(t *testing.T, b Backend) {
	key := Key(t)
	l, other := b.New(t), b.New(t)
	ctx := ctxT(t, 10*time.Second)
	sentinel := errors.New("work failed")
	err := dlock.Do(ctx, l, key, func(ctx context.Context) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if _, err := other.TryLock(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
			t.Errorf("TryLock inside Do: %v", err)
		}
		return sentinel
	})
	if !errors.Is(err, sentinel) {
		t.Fatalf("Do: %v, want the function's error", err)
	}
	lease := mustLock(t, other, key) // released by Do
	unlock(t, lease)
	// A lock lost while fn runs cancels fn's context and is reported.
	err = dlock.Do(ctx, l, key, func(ctx context.Context) error {
		<-ctx.Done()
		return context.Cause(ctx)
	}, dlock.WithTTL(50*time.Millisecond))
	if !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Do with a lost lock: %v, want ErrLockLost", err)
	}
	// A panic in fn that is recovered further up, and runtime.Goexit (t.FailNow),
	// release the lock on their way out; the panic goes on.
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("Do did not pass fn's panic on: recovered %v", r)
			}
		}()
		_ = dlock.Do(ctx, l, key, func(context.Context) error { panic("boom") })
	}()
	lease = mustLock(t, other, key)
	unlock(t, lease)
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		_ = dlock.Do(ctx, l, key, func(context.Context) error { runtime.Goexit(); return nil })
	}()
	<-exited
	lease = mustLock(t, other, key)
	unlock(t, lease)
	if err := dlock.Do(ctx, l, key, nil); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Do(nil fn): %v", err)
	}
	if err := dlock.Do(ctx, nil, key, func(context.Context) error { return nil }); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Do(nil locker): %v", err)
	}
}

// roundedUp reports whether the TTL limits of l (from its TTLLimits method, as
// a *dlock.Client has) accept ttl by rounding it up to their step, as etcd's
// whole seconds do with a TTL of a few milliseconds: for such a backend that
// TTL is no bad input.
// scaled returns d, or the shortest TTL the backend of l grants if that is longer.
func scaled(l dlock.Locker, d time.Duration) time.Duration {
	if tl, ok := l.(interface{ TTLLimits() driver.TTLLimits }); ok {
		if got, err := tl.TTLLimits().Normalize(max(d, tl.TTLLimits().Min)); err == nil {
			return got
		}
	}
	return d
}

func roundedUp(l dlock.Locker, ttl time.Duration) bool {
	lim := driver.DefaultTTLLimits
	if tl, ok := l.(interface{ TTLLimits() driver.TTLLimits }); ok {
		lim = tl.TTLLimits()
	}
	got, err := lim.Normalize(ttl)
	return err == nil && got != ttl
}

func testBadInput(t *testing.T, b Backend) {
	l := b.New(t)
	ctx := ctxT(t, 10*time.Second)
	key := Key(t)
	badKeys := []string{"", "   ", "\t\n", "a\x00b", "a\x7fb", "bad\xffutf8", "a{b", "a}b", strings.Repeat("k", driver.MaxKeyLen+1)}
	for _, k := range badKeys {
		for name, f := range map[string]func(context.Context, string, ...dlock.Option) (*dlock.Lease, error){"TryLock": l.TryLock, "Lock": l.Lock} {
			if lease, err := f(ctx, k); !errors.Is(err, dlock.ErrInvalid) || lease != nil {
				t.Errorf("%s(%q): %v, %v; want ErrInvalid", name, k, lease, err)
			}
		}
	}
	badOpts := map[string]dlock.Option{
		"ttl 0":               dlock.WithTTL(0),
		"ttl -1s":             dlock.WithTTL(-time.Second),
		"ttl huge":            dlock.WithTTL(time.Duration(math.MaxInt64)),
		"wait -1s":            dlock.WithWait(-time.Second),
		"renew 0":             dlock.WithRenewEvery(0),
		"max hold 0":          dlock.WithMaxHold(0),
		"retry nil":           dlock.WithRetry(nil),
		"retry fixed 0":       dlock.WithRetry(dlock.FixedBackoff(0)),
		"retry expo max<min":  dlock.WithRetry(dlock.ExponentialBackoff(time.Second, time.Millisecond)),
		"retry limit 0":       dlock.WithRetry(dlock.LimitAttempts(dlock.FixedBackoff(time.Millisecond), 0)),
		"drift NaN":           dlock.WithDriftFactor(math.NaN()),
		"drift negative":      dlock.WithDriftFactor(-0.1),
		"drift 1":             dlock.WithDriftFactor(1),
		"metadata too long":   dlock.WithMetadata(strings.Repeat("m", driver.MaxMetadataLen+1)),
		"nil option":          nil,
		"renew >= ttl":        dlock.Combine(dlock.WithTTL(time.Second), dlock.WithAutoRenew(true), dlock.WithRenewEvery(time.Second)),
		"default ttl renew>=": dlock.WithRenewEvery(dlock.DefaultTTL),
	}
	for name, ttl := range map[string]time.Duration{"ttl 500us": 500 * time.Microsecond, "ttl below drift": 4 * time.Millisecond} {
		if !roundedUp(l, ttl) {
			badOpts[name] = dlock.WithTTL(ttl)
		}
	}
	for name, o := range badOpts {
		for fname, f := range map[string]func(context.Context, string, ...dlock.Option) (*dlock.Lease, error){"TryLock": l.TryLock, "Lock": l.Lock} {
			if lease, err := f(ctx, key, o); !errors.Is(err, dlock.ErrInvalid) || lease != nil {
				t.Errorf("%s with %s: %v, %v; want ErrInvalid", fname, name, lease, err)
			}
		}
	}
	//lint:ignore SA1012 a nil context is the bad input under test
	if _, err := l.TryLock(nil, key); !errors.Is(err, dlock.ErrInvalid) { //nolint:staticcheck
		t.Errorf("TryLock(nil ctx): %v", err)
	}
	// Nothing was taken by any of the above.
	lease := mustLock(t, l, key)
	//lint:ignore SA1012 a nil context is the bad input under test
	if err := lease.Unlock(nil); !errors.Is(err, dlock.ErrInvalid) { //nolint:staticcheck
		t.Errorf("Unlock(nil ctx): %v", err)
	}
	unlock(t, lease)
}

func testConflict(t *testing.T, b Backend) {
	if b.Occupy == nil {
		t.Skip("backend has no foreign data to store")
	}
	key := Key(t)
	intact := b.Occupy(t, key)
	l := b.New(t)
	ctx := ctxT(t, 10*time.Second)
	if _, err := l.TryLock(ctx, key); !errors.Is(err, dlock.ErrConflict) {
		t.Errorf("TryLock on foreign data: %v, want ErrConflict", err)
	}
	if _, err := l.Lock(ctx, key, dlock.WithWait(time.Second)); !errors.Is(err, dlock.ErrConflict) {
		t.Errorf("Lock on foreign data: %v, want ErrConflict", err)
	}
	if !intact() {
		t.Fatal("foreign data changed by a lock attempt")
	}
}

func testInspector(t *testing.T, b Backend) {
	l := b.New(t)
	insp, ok := l.(driver.Inspector)
	if !ok {
		t.Skip("the Locker is not a driver.Inspector")
	}
	ctx := ctxT(t, 10*time.Second)
	key := Key(t)
	info, err := insp.Inspect(ctx, key)
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("the backend cannot inspect its locks: %v", err)
	}
	if err != nil || info.Held {
		t.Fatalf("Inspect of a free lock: %+v, %v", info, err)
	}
	lease := mustLock(t, l, key, dlock.WithMetadata("inspected"), dlock.WithTTL(5*time.Second))
	info, err = insp.Inspect(ctx, key)
	if err != nil || !info.Held || info.Owner != lease.Owner() || info.Token != lease.Token() || info.Metadata != "inspected" {
		t.Fatalf("Inspect of a held lock: %+v, %v; want owner %s token %d", info, err, lease.Owner(), lease.Token())
	}
	if info.TTL > 5*time.Second || info.TTL == 0 {
		t.Errorf("Inspect TTL %v of a 5s lease", info.TTL)
	}
	infos, err := driver.List(ctx, insp, key[:len(key)-4]+"*")
	if err != nil || len(infos) != 1 || infos[0].Key != key {
		t.Fatalf("List: %+v, %v; want %s alone", infos, err, key)
	}
	if _, err := driver.List(ctx, insp, ""); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("List(\"\"): %v, want ErrInvalid", err)
	}
	if _, err := insp.ForceUnlock(ctx, key); err != nil {
		t.Fatalf("ForceUnlock: %v", err)
	}
	if _, err := insp.ForceUnlock(ctx, key); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("ForceUnlock of a free lock: %v, want ErrNotHeld", err)
	}
	if err := lease.Extend(ctx, 5*time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Extend after ForceUnlock: %v, want ErrNotHeld", err)
	}
	next := mustLock(t, b.New(t), key)
	if next.Token() <= lease.Token() {
		t.Errorf("token %d after ForceUnlock, not above %d", next.Token(), lease.Token())
	}
	unlock(t, next)
}

// targets is an Observer that keeps the Target of every event.
type targets struct {
	dlock.NopObserver
	mu  sync.Mutex
	got []dlock.Target
}

func (o *targets) add(t dlock.Target) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = append(o.got, t)
}

func (o *targets) AcquireStart(ctx context.Context, e dlock.AcquireStartEvent) context.Context {
	o.add(e.Target)
	return ctx
}

func (o *targets) AcquireEnd(ctx context.Context, e dlock.AcquireEndEvent) context.Context {
	o.add(e.Target)
	return ctx
}

func (o *targets) Release(_ context.Context, e dlock.ReleaseEvent) { o.add(e.Target) }

func testDriverInfo(t *testing.T, b Backend) {
	l := b.New(t)
	dl, ok := l.(interface{ Driver() driver.Driver })
	if !ok {
		t.Fatalf("the Locker %T has no Driver method: the suite cannot read the driver's names", l)
	}
	info := dl.Driver().Info()
	if err := info.Check(); err != nil {
		t.Fatalf("the driver's Info: %v", err)
	}
	if b.Info != (driver.DriverInfo{}) && info != b.Info {
		t.Fatalf("the driver names itself %+v, want %+v", info, b.Info)
	}
	o := &targets{}
	key := Key(t)
	unlock(t, mustLock(t, l, key, dlock.WithObserver(o)))
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.got) < 3 { // more when the set-up tried again
		t.Fatalf("%d events told of a TryLock and Unlock, want 3 (start, end, release)", len(o.got))
	}
	for _, got := range o.got {
		if want := (dlock.Target{Key: key, Backend: info.Backend, Kind: info.Kind}); got != want {
			t.Errorf("an event's Target is %+v, want %+v", got, want)
		}
	}
}
