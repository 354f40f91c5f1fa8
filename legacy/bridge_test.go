package legacy_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/legacy"
	"github.com/dlock-go/dlock/redislock"
	"golang.org/x/sync/errgroup"
)

func newBridge(t testing.TB, f legacy.Format, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	b, err := legacy.NewBridge(newRDB(t), f, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newSafe(t testing.TB, opts ...dlock.Option) *redislock.Client {
	t.Helper()
	c, err := redislock.New(newRDB(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestBridgeConformance(t *testing.T) {
	f := legacy.Format{Key: legacy.Prefix("lock."), Expire: true}
	dlocktest.Run(t, dlocktest.Backend{
		Info: driver.DriverInfo{Backend: "legacy", Kind: driver.KindMutex},
		New: func(t testing.TB, opts ...dlock.Option) dlock.Locker {
			return newBridge(t, f, opts...)
		},
		Occupy: occupy(f, "garbage"),
	})
}

// TestBridgeExcludesBoth: a Bridge lease keeps out old clients (legacy key) and
// redislock clients (redislock key), is kept out by either, and leaves nothing
// behind when the second half is refused.
func TestBridgeExcludesBoth(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	rdb := newRDB(t)
	f := legacy.Format{Key: legacy.Prefix("lock.")}
	key := dlocktest.Key(t)
	br := newBridge(t, f, dlock.WithTTL(10*time.Second))
	safe := newSafe(t)
	old := &springLock{rdb: newRDB(t), key: "lock." + key, expire: 10 * time.Second, now: time.Now}

	l, err := br.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := old.tryLock(ctx); ok || err != nil {
		t.Fatalf("old client during a Bridge lease: %v %v", ok, err)
	}
	if _, err := safe.TryLock(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("redislock during a Bridge lease: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// An old client holds: the Bridge is refused and rolls back its redislock half.
	if ok, err := old.tryLock(ctx); !ok || err != nil {
		t.Fatalf("old client: %v %v", ok, err)
	}
	before := br.Driver().(*legacy.BridgeDriver).Legacy().ForeignHolds()
	if _, err := br.TryLock(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("Bridge while an old client holds: %v", err)
	}
	if n := br.Driver().(*legacy.BridgeDriver).Legacy().ForeignHolds() - before; n != 1 {
		t.Errorf("ForeignHolds grew by %d, want 1", n)
	}
	if n := rdb.Exists(ctx, redislock.LockKey(key)).Val(); n != 0 {
		t.Fatal("redislock half left behind after the legacy half was refused")
	}
	if err := old.unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// A redislock client holds: the Bridge never touches the legacy key.
	s, err := safe.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := br.TryLock(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("Bridge while redislock holds: %v", err)
	}
	if n := rdb.Exists(ctx, "lock."+key).Val(); n != 0 {
		t.Fatal("Bridge wrote the legacy key without holding the redislock key")
	}
	if err := s.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// Tokens continue across Bridge and redislock leases.
	var last uint64
	for i := 0; i < 6; i++ {
		var l dlock.Locker = br
		if i%2 == 1 {
			l = safe
		}
		lease, err := l.TryLock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if lease.Token() <= last {
			t.Fatalf("token %d after %d", lease.Token(), last)
		}
		last = lease.Token()
		if err := lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMigration runs the two phases on one key with an overlap checker: old
// clients (seeds 000 and 002), Bridges and dlock legacy lockers together; then,
// once the old clients have stopped, redislock clients join the Bridges, which
// stay until the end. No two holders at any time. A control shows why the order
// matters: old clients and plain redislock clients do not exclude each other.
func TestMigration(t *testing.T) {
	key := dlocktest.Key(t)
	lk := "lock." + key
	f := legacy.Format{Key: legacy.Prefix("lock.")}
	const expire = 10 * time.Second
	ctx := ctxT(t, 50*time.Second)
	opts := []dlock.Option{dlock.WithTTL(expire)}
	var old, bridges, plain []contender
	end := make(chan struct{})
	for i := 0; i < 2; i++ {
		old = append(old,
			contender{name: "jedis", c: &jedisLock{rdb: newRDB(t), key: lk, expired: expire, now: time.Now}, rounds: 8},
			contender{name: "spring", c: &springLock{rdb: newRDB(t), key: lk, expire: expire, now: time.Now}, rounds: 8},
			contender{name: "legacy", c: &dlockClient{l: newLegacy(t, f), key: key, opts: opts}, rounds: 8},
		)
		bridges = append(bridges, contender{name: "bridge", c: &dlockClient{l: newBridge(t, f), key: key, opts: opts}, rounds: 8, until: end})
		plain = append(plain, contender{name: "redislock", c: &dlockClient{l: newSafe(t), key: key, opts: opts}, rounds: 8})
	}
	o := &overlap{}
	o.phase.Store(1)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		return runContenders(gctx, o, bridges, 200*time.Microsecond)
	})
	g.Go(func() error {
		// Phase 1: old clients beside the Bridges. Phase 2 starts when they are gone.
		defer close(end) // the Bridges stop once phase 2 is over
		if err := runContenders(gctx, o, old, 200*time.Microsecond); err != nil {
			return err
		}
		o.phase.Store(2)
		return runContenders(gctx, o, plain, 200*time.Microsecond)
	})
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	t.Logf("SUMMARY migration: %d critical sections (%s), %d overlaps", o.entries.Load(), o.summary(), o.overlaps.Load())
	if o.overlaps.Load() != 0 {
		t.Fatalf("%d overlapping critical sections during the migration", o.overlaps.Load())
	}
	if o.by["bridge@phase2"] == 0 {
		t.Error("no Bridge held the lock in phase 2")
	}

	// Control: skipping phase 1's end (old clients still running beside plain
	// redislock clients) gives two holders at once.
	var both int
	const rounds = 5
	for r := 0; r < rounds; r++ {
		k := dlocktest.Key(t)
		s, err := plain[0].c.(*dlockClient).l.TryLock(ctx, k, opts...)
		if err != nil {
			t.Fatal(err)
		}
		j := &springLock{rdb: newRDB(t), key: "lock." + k, expire: expire, now: time.Now}
		if ok, err := j.tryLock(ctx); err != nil {
			t.Fatal(err)
		} else if ok {
			both++
			_ = j.unlock(ctx)
		}
		_ = s.Unlock(ctx)
	}
	t.Logf("SUMMARY control: an old client and a plain redislock client held the lock together in %d of %d rounds", both, rounds)
	if both != rounds {
		t.Fatalf("control: %d of %d", both, rounds)
	}
}

// runContenders is contend for use inside an errgroup: it returns errors.
func runContenders(ctx context.Context, o *overlap, cs []contender, hold time.Duration) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, c := range cs {
		g.Go(func() error { return c.run(gctx, o, hold) })
	}
	return g.Wait()
}

// TestBridgeReleaseWakesRedislockWaiters: in phase 2, a redislock client
// waiting on a Bridge's lease is woken by the Bridge's release (it publishes on
// the redislock key's channel), not left to sleep out the lease's TTL.
func TestBridgeReleaseWakesRedislockWaiters(t *testing.T) {
	ctx := ctxT(t, 20*time.Second)
	rdb := newRDB(t)
	key := dlocktest.Key(t)
	br := newBridge(t, legacy.Format{}, dlock.WithTTL(10*time.Second))
	l, err := br.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	waiter := newSafe(t)
	got := make(chan error, 1)
	go func() {
		lease, err := waiter.Lock(ctx, key, dlock.WithWait(8*time.Second))
		if err == nil {
			err = lease.Unlock(ctx)
		}
		got <- err
	}()
	// The waiter marks the holding it waits on.
	// The plain lock record starts with '+' when marked (see redislock).
	for !strings.HasPrefix(rdb.Get(ctx, redislock.LockKey(key)).Val(), "+") {
		select {
		case <-ctx.Done():
			t.Fatal("waiter never marked the lock")
		case <-time.After(time.Millisecond):
		}
	}
	start := time.Now()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("waiter took the lock %v after the Bridge released it", el)
	}
}
