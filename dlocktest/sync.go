package dlocktest

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// SyncBackend describes the latch and barrier side of a backend under test
// (dlock.SyncDriver).
type SyncBackend struct {
	// New returns a SyncDriver with its own connection(s) to the server under
	// test, closed by t.Cleanup. It is called several times per test to stand
	// for separate processes.
	New func(t testing.TB) dlock.SyncDriver

	// Occupy, when set, stores data that is neither a latch nor a barrier
	// where the latch and the barrier named name would live, and returns a
	// function that reports whether that data is still intact.
	Occupy func(t testing.TB, name string) (intact func() bool)

	// TTL is the shortest party lease the tests use (rounded up by stores
	// with coarse TTLs); zero means 500 ms.
	TTL time.Duration
}

// RunSync runs the latch and barrier suite as subtests of t.
func RunSync(t *testing.T, b SyncBackend) {
	if b.New == nil {
		t.Fatal("dlocktest: SyncBackend.New is nil")
	}
	if b.TTL == 0 {
		b.TTL = 500 * time.Millisecond
	}
	tests := []struct {
		name string
		fn   func(*testing.T, SyncBackend)
	}{
		{"LatchOpensAtZeroAcrossClients", testLatchOpens},
		{"LatchCountDownPastZeroIsNoOp", testLatchPastZero},
		{"LatchWaitCancelled", testLatchCancel},
		{"LatchForgottenAfterTTL", testLatchExpires},
		{"LatchCountMismatchIsConflict", testLatchMismatch},
		{"BarrierReleasesAllParties", testBarrierAll},
		{"BarrierCancelledEnterWithdraws", testBarrierWithdraw},
		{"BarrierCancelAtRandomLeavesNothing", testBarrierCancelRandom},
		{"BarrierDeadPartyLapses", testBarrierDeadParty},
		{"BarrierCancelledLeaveLeavesNothing", testBarrierCancelLeave},
		{"BarrierIsReusable", testBarrierReuse},
		{"SyncBadInput", testSyncBadInput},
		{"SyncForeignDataIsConflict", testSyncConflict},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, b) })
	}
}

func newLatch(t testing.TB, d dlock.SyncDriver, name string, n int, ttl time.Duration) *dlock.Latch {
	t.Helper()
	l, err := dlock.NewLatch(d, name, n, ttl)
	if err != nil {
		t.Fatalf("NewLatch(%q, %d): %v", name, n, err)
	}
	return l
}

func newBarrier(t testing.TB, d dlock.SyncDriver, name string, n int, ttl time.Duration) *dlock.Barrier {
	t.Helper()
	b, err := dlock.NewBarrier(d, name, n, ttl)
	if err != nil {
		t.Fatalf("NewBarrier(%q, %d): %v", name, n, err)
	}
	return b
}

func testLatchOpens(t *testing.T, b SyncBackend) {
	const n = 3
	name := Key(t)
	var counted atomic.Int32 // count-downs that have returned
	errs := make(chan error, 2)
	var early atomic.Int32
	for range 2 {
		l := newLatch(t, b.New(t), name, n, time.Minute)
		go func() {
			err := l.Wait(ctxT(t, 30*time.Second))
			if counted.Load() < n {
				// Released before the n-th count-down returned: only
				// allowed once it was applied, which Count shows.
				if c, cerr := l.Count(ctxT(t, 10*time.Second)); cerr != nil || c != 0 {
					early.Add(1)
				}
			}
			errs <- err
		}()
	}
	for i := range n {
		l := newLatch(t, b.New(t), name, n, time.Minute)
		left, err := l.CountDown(ctxT(t, 10*time.Second))
		if err != nil || left != n-1-i {
			t.Fatalf("CountDown %d: %d, %v; want %d", i+1, left, err, n-1-i)
		}
		counted.Add(1)
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("Wait: %v", err)
		}
	}
	if early.Load() != 0 {
		t.Fatalf("%d waiters released before the latch reached zero", early.Load())
	}
}

func testLatchPastZero(t *testing.T, b SyncBackend) {
	l := newLatch(t, b.New(t), Key(t), 1, time.Minute)
	for i := range 3 {
		left, err := l.CountDown(ctxT(t, 10*time.Second))
		if err != nil || left != 0 {
			t.Fatalf("CountDown %d: %d, %v; want 0", i+1, left, err)
		}
	}
	if c, err := l.Count(ctxT(t, 10*time.Second)); err != nil || c != 0 {
		t.Fatalf("Count: %d, %v; want 0", c, err)
	}
	if err := l.Wait(ctxT(t, 10*time.Second)); err != nil {
		t.Fatalf("Wait on an open latch: %v", err)
	}
}

func testLatchCancel(t *testing.T, b SyncBackend) {
	l := newLatch(t, b.New(t), Key(t), 2, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := l.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait: %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Wait returned %v after its deadline", d)
	}
	if c, err := l.Count(ctxT(t, 10*time.Second)); err != nil || c != 2 {
		t.Fatalf("Count after a cancelled Wait: %d, %v; want 2", c, err)
	}
}

func testLatchExpires(t *testing.T, b SyncBackend) {
	d := b.New(t)
	name := Key(t)
	l := newLatch(t, d, name, 2, b.TTL)
	if left, err := l.CountDown(ctxT(t, 10*time.Second)); err != nil || left != 1 {
		t.Fatalf("CountDown: %d, %v", left, err)
	}
	// Reading the latch keeps it: wait out its TTL without reading (no event
	// to await), a few times over on a slow machine.
	for wait := b.TTL + b.TTL/2; ; wait *= 2 {
		time.Sleep(wait)
		c, err := newLatch(t, d, name, 2, b.TTL).Count(ctxT(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if c == 2 {
			return
		}
		if wait > 10*time.Second {
			t.Fatalf("the latch still counts %d long after its TTL", c)
		}
	}
}

func testLatchMismatch(t *testing.T, b SyncBackend) {
	name := Key(t)
	if _, err := newLatch(t, b.New(t), name, 3, time.Minute).CountDown(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	other := newLatch(t, b.New(t), name, 5, time.Minute)
	if _, err := other.CountDown(ctxT(t, 10*time.Second)); !errors.Is(err, dlock.ErrConflict) {
		t.Fatalf("CountDown with another count: %v, want ErrConflict", err)
	}
	if err := other.Wait(ctxT(t, 10*time.Second)); !errors.Is(err, dlock.ErrConflict) {
		t.Fatalf("Wait with another count: %v, want ErrConflict", err)
	}
}

// enterAll enters n parties of the barrier name at once and returns their
// handles once all are in.
func enterAll(t *testing.T, b SyncBackend, name string, n int, ttl time.Duration) []*dlock.Barrier {
	t.Helper()
	parties := make([]*dlock.Barrier, n)
	var arrived atomic.Int32
	var early atomic.Int32
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range parties {
		parties[i] = newBarrier(t, b.New(t), name, n, ttl)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i == n-1 {
				// The last party comes late: nobody may pass before it.
				time.Sleep(100 * time.Millisecond)
			}
			arrived.Add(1)
			errs[i] = parties[i].Enter(ctxT(t, 30*time.Second))
			if arrived.Load() < int32(n) {
				early.Add(1)
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("party %d: Enter: %v", i, err)
		}
	}
	if early.Load() != 0 {
		t.Fatalf("%d parties passed before all %d arrived", early.Load(), n)
	}
	return parties
}

func testBarrierAll(t *testing.T, b SyncBackend) {
	const n = 3
	name := Key(t)
	parties := enterAll(t, b, name, n, 10*time.Second)
	// Leave: nobody returns before the last party has left.
	var left atomic.Int32
	var early atomic.Int32
	var wg sync.WaitGroup
	for i, p := range parties {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i == n-1 {
				time.Sleep(200 * time.Millisecond)
				left.Add(1)
			}
			if err := p.Leave(ctxT(t, 30*time.Second)); err != nil {
				t.Errorf("party %d: Leave: %v", i, err)
			}
			if i != n-1 && left.Load() == 0 {
				early.Add(1)
			}
		}()
	}
	wg.Wait()
	if early.Load() != 0 {
		t.Fatalf("%d parties left before the last one did", early.Load())
	}
}

func testBarrierWithdraw(t *testing.T, b SyncBackend) {
	name := Key(t)
	a := newBarrier(t, b.New(t), name, 2, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := a.Enter(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Enter alone: %v, want context.DeadlineExceeded", err)
	}
	// The withdrawn party does not count: a second one alone stays out.
	c := newBarrier(t, b.New(t), name, 2, time.Minute)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel2()
	if err := c.Enter(ctx2); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Enter after a withdrawn party: %v, want context.DeadlineExceeded", err)
	}
	if n, _, err := b.New(t).Depart(ctxT(t, 10*time.Second), name, "nobody", 2); err != nil || n != 0 {
		t.Fatalf("parties left behind: %d, %v", n, err)
	}
}

func testBarrierCancelRandom(t *testing.T, b SyncBackend) {
	name := Key(t)
	d := b.New(t)
	for i := range 20 {
		p := newBarrier(t, d, name, 2, b.TTL)
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(20000))*time.Microsecond)
		err := p.Enter(ctx)
		cancel()
		if err == nil {
			t.Fatalf("attempt %d: one party of two entered", i)
		}
	}
	// Whatever a cancelled Enter could not take back lapses within the TTL.
	deadline := time.Now().Add(b.TTL + 10*time.Second)
	for {
		n, _, err := d.Depart(ctxT(t, 10*time.Second), name, "nobody", 2)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d arrivals left long after their TTL", n)
		}
		time.Sleep(b.TTL / 5) // waiting out a TTL
	}
}

func testBarrierDeadParty(t *testing.T, b SyncBackend) {
	name := Key(t)
	// A party that arrives and dies (it never renews nor leaves).
	dead := b.New(t)
	if _, err := dead.Arrive(ctxT(t, 10*time.Second), name, "dead-party", 2, b.TTL); err != nil {
		t.Fatal(err)
	}
	live := newBarrier(t, b.New(t), name, 2, time.Minute)
	if err := live.Enter(ctxT(t, 10*time.Second)); err != nil {
		t.Fatalf("Enter with the dead party's arrival live: %v", err)
	}
	start := time.Now()
	if err := live.Leave(ctxT(t, b.TTL+30*time.Second)); err != nil {
		t.Fatalf("Leave with a dead party inside: %v", err)
	}
	if d := time.Since(start); d > b.TTL+5*time.Second {
		t.Fatalf("Leave took %v with a dead party of TTL %v", d, b.TTL)
	}
}

func testBarrierCancelLeave(t *testing.T, b SyncBackend) {
	name := Key(t)
	parties := enterAll(t, b, name, 2, b.TTL)
	// One party's Leave is cut short at a random moment: it is out of the
	// barrier all the same (told, or lapsed after the TTL), and the other's
	// Leave returns.
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(5000))*time.Microsecond)
	defer cancel()
	_ = parties[0].Leave(ctx)
	start := time.Now()
	if err := parties[1].Leave(ctxT(t, b.TTL+30*time.Second)); err != nil {
		t.Fatalf("Leave after a cancelled Leave: %v", err)
	}
	if d := time.Since(start); d > b.TTL+5*time.Second {
		t.Fatalf("Leave took %v after the other party's cancelled Leave, TTL %v", d, b.TTL)
	}
	if n, _, err := b.New(t).Depart(ctxT(t, 10*time.Second), name, "nobody", 2); err != nil || n != 0 {
		t.Fatalf("parties left behind: %d, %v", n, err)
	}
}

func testBarrierReuse(t *testing.T, b SyncBackend) {
	name := Key(t)
	for round := range 2 {
		parties := enterAll(t, b, name, 2, 10*time.Second)
		var wg sync.WaitGroup
		for _, p := range parties {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := p.Leave(ctxT(t, 30*time.Second)); err != nil {
					t.Errorf("round %d: Leave: %v", round, err)
				}
			}()
		}
		wg.Wait()
	}
	// A single party of a used barrier of two waits again.
	p := newBarrier(t, b.New(t), name, 2, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := p.Enter(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Enter alone after two rounds: %v, want context.DeadlineExceeded", err)
	}
}

func testSyncBadInput(t *testing.T, b SyncBackend) {
	d := b.New(t)
	for _, c := range []struct {
		what string
		err  func() error
	}{
		{"latch count 0", func() error { _, err := dlock.NewLatch(d, "x", 0, time.Minute); return err }},
		{"latch count -1", func() error { _, err := dlock.NewLatch(d, "x", -1, time.Minute); return err }},
		{"latch empty name", func() error { _, err := dlock.NewLatch(d, "", 1, time.Minute); return err }},
		{"latch TTL 0", func() error { _, err := dlock.NewLatch(d, "x", 1, 0); return err }},
		{"latch nil driver", func() error { _, err := dlock.NewLatch(nil, "x", 1, time.Minute); return err }},
		{"barrier parties 0", func() error { _, err := dlock.NewBarrier(d, "x", 0, time.Minute); return err }},
		{"barrier empty name", func() error { _, err := dlock.NewBarrier(d, "", 2, time.Minute); return err }},
		{"barrier TTL -1", func() error { _, err := dlock.NewBarrier(d, "x", 2, -1); return err }},
		{"leave before enter", func() error { return newBarrier(t, d, Key(t), 1, time.Minute).Leave(ctxT(t, time.Second)) }},
		{"enter twice", func() error {
			p := newBarrier(t, d, Key(t), 1, time.Minute)
			if err := p.Enter(ctxT(t, 10*time.Second)); err != nil {
				return err
			}
			defer func() { _ = p.Leave(ctxT(t, 10*time.Second)) }()
			return p.Enter(ctxT(t, 10*time.Second))
		}},
	} {
		if err := c.err(); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", c.what, err)
		}
	}
}

func testSyncConflict(t *testing.T, b SyncBackend) {
	if b.Occupy == nil {
		t.Skip("no way to store foreign data")
	}
	name := Key(t)
	intact := b.Occupy(t, name)
	d := b.New(t)
	l := newLatch(t, d, name, 2, time.Minute)
	if _, err := l.CountDown(ctxT(t, 10*time.Second)); !errors.Is(err, dlock.ErrConflict) {
		t.Errorf("CountDown over foreign data: %v, want ErrConflict", err)
	}
	if _, err := l.Count(ctxT(t, 10*time.Second)); !errors.Is(err, dlock.ErrConflict) {
		t.Errorf("Count over foreign data: %v, want ErrConflict", err)
	}
	if err := newBarrier(t, d, name, 2, time.Minute).Enter(ctxT(t, 10*time.Second)); !errors.Is(err, dlock.ErrConflict) {
		t.Errorf("Enter over foreign data: %v, want ErrConflict", err)
	}
	if !intact() {
		t.Error("the foreign data was changed")
	}
}
