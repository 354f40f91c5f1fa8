package pglock

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
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testproxy"
	"github.com/jackc/pgx/v5/pgxpool"
)

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// admin runs sql on a connection of its own and fails the test on an error.
func admin(t testing.TB, sql string, args ...any) {
	t.Helper()
	if _, err := newPool(t).Exec(ctxT(t, 10*time.Second), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func TestBadInputIsInvalid(t *testing.T) {
	pool := newPool(t)
	if _, err := New(nil); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("New(nil): %v", err)
	}
	var nilPool *pgxpool.Pool
	if _, err := NewDriver(nilPool); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("NewDriver(nil): %v", err)
	}
	for _, table := range []string{"1abc", "a-b", "a.b.c", `a"b`, "a b", strings.Repeat("t", 58), ".t", "t."} {
		if _, err := NewDriver(pool, WithTable(table)); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("table %q: %v", table, err)
		}
	}
	for _, bad := range [][]Option{{WithRequestTimeout(-time.Second)}, {WithRequestTimeout(0)}, {WithTable("")}, {nil}} {
		if _, err := NewDriver(pool, bad...); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("NewDriver with bad options: %v", err)
		}
		if _, err := NewFairDriver(pool, bad...); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("NewFairDriver with bad options: %v", err)
		}
		if _, err := NewSemaphoreDriver(pool, 2, bad...); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("NewSemaphoreDriver with bad options: %v", err)
		}
	}
	if _, err := NewClient(nil); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("NewClient(nil): %v", err)
	}
	if _, err := New(pool, dlock.WithTTL(-time.Second)); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("bad option: %v", err)
	}
	ctx := ctxT(t, 10*time.Second)
	c, _ := New(pool)
	for _, meta := range []string{"a\x00b", "bad\xffutf8"} {
		if l, err := c.TryLock(ctx, dlocktest.Key(t), dlock.WithMetadata(meta)); !errors.Is(err, dlock.ErrInvalid) || l != nil {
			t.Errorf("metadata %q: %v, want ErrInvalid", meta, err)
		}
	}
	var d *Driver
	if _, err := d.Acquire(ctx, driver.AcquireRequest{Key: "k", Owner: "o", TTL: time.Second}); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("nil driver Acquire: %v", err)
	}
	if _, err := d.Inspect(ctx, "k"); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("nil driver Inspect: %v", err)
	}
	if err := d.Migrate(ctx); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("nil driver Migrate: %v", err)
	}
	d = newDriver(t)
	for _, key := range []string{"", "a{b", "a\x00b", strings.Repeat("k", driver.MaxKeyLen+1)} {
		if _, err := d.Inspect(ctx, key); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("Inspect(%q): %v", key, err)
		}
		if _, err := d.ForceUnlock(ctx, key); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("ForceUnlock(%q): %v", key, err)
		}
	}
	if _, err := driver.List(ctx, d, "a}"); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("List(bad): %v", err)
	}
	//lint:ignore SA1012 a nil context is the bad input under test
	if err := d.Migrate(nil); !errors.Is(err, dlock.ErrInvalid) { //nolint:staticcheck
		t.Errorf("Migrate(nil ctx): %v", err)
	}
	if err := d.Fence(ctx, nil, nil); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Fence(nil tx): %v", err)
	}
	if err := d.FenceSQL(ctx, nil, nil); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("FenceSQL(nil tx): %v", err)
	}
}

// uniqueTable returns a table name of its own for a test.
func uniqueTable(t testing.TB) string {
	return fmt.Sprintf("t%d_%d", time.Now().UnixNano()%1e9, len(t.Name()))
}

func TestMissingTableIsRefusedAndCreatedOnDemand(t *testing.T) {
	table := uniqueTable(t)
	c := clientOf(t, newDriver(t, WithTable(table)))
	ctx := ctxT(t, 20*time.Second)
	_, err := c.TryLock(ctx, "k")
	if !errors.Is(err, dlock.ErrRefused) || !strings.Contains(err.Error(), "Migrate") {
		t.Fatalf("TryLock without the table: %v, want ErrRefused naming Migrate", err)
	}
	// Lock does not wait on a refusal.
	start := time.Now()
	if _, err := c.Lock(ctx, "k", dlock.WithWait(5*time.Second)); !errors.Is(err, dlock.ErrRefused) || time.Since(start) > 2*time.Second {
		t.Fatalf("Lock without the table: %v after %v", err, time.Since(start))
	}
	auto := clientOf(t, newDriver(t, WithTable("s_"+table+".locks"), WithCreateTable()))
	l, err := auto.TryLock(ctx, "k")
	if err != nil {
		t.Fatalf("TryLock with CreateTable: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// Concurrent migrations of one table do not trip over each other.
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- newDriver(t, WithTable(table)).Migrate(ctx)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent Migrate: %v", err)
		}
	}
	l, err = c.TryLock(ctx, "k")
	if err != nil {
		t.Fatalf("TryLock after Migrate: %v", err)
	}
	_ = l.Unlock(ctx)
}

func TestForeignTableIsConflict(t *testing.T) {
	table := uniqueTable(t)
	admin(t, "CREATE TABLE "+table+" (key text PRIMARY KEY, value int)")
	admin(t, "INSERT INTO "+table+" VALUES ('k', 42)")
	d := newDriver(t, WithTable(table))
	ctx := ctxT(t, 10*time.Second)
	if err := d.Migrate(ctx); !errors.Is(err, dlock.ErrConflict) {
		t.Errorf("Migrate over a foreign table: %v, want ErrConflict", err)
	}
	c, _ := NewClient(d)
	if _, err := c.TryLock(ctx, "k"); !errors.Is(err, dlock.ErrConflict) {
		t.Errorf("TryLock on a foreign table: %v, want ErrConflict", err)
	}
	if _, err := c.Lock(ctx, "k", dlock.WithWait(time.Second)); !errors.Is(err, dlock.ErrConflict) {
		t.Errorf("Lock on a foreign table: %v, want ErrConflict", err)
	}
	var v int
	if err := newPool(t).QueryRow(ctx, "SELECT value FROM "+table+" WHERE key = 'k'").Scan(&v); err != nil || v != 42 {
		t.Fatalf("foreign row after lock attempts: %v, %v", v, err)
	}
	// The right columns without a unique token: fencing could not work.
	lookalike := table + "_l"
	admin(t, "CREATE TABLE "+lookalike+` (key text PRIMARY KEY, owner text NOT NULL, token bigint NOT NULL,
		expires_at timestamptz NOT NULL, metadata text NOT NULL DEFAULT '', abandoned text[] NOT NULL DEFAULT '{}',
		abandoned_until timestamptz NOT NULL DEFAULT '-infinity')`)
	admin(t, "CREATE SEQUENCE "+lookalike+"_token")
	if err := newDriver(t, WithTable(lookalike)).Migrate(ctx); !errors.Is(err, dlock.ErrConflict) || !strings.Contains(err.Error(), "unique") {
		t.Errorf("Migrate over a table without a unique token: %v, want ErrConflict", err)
	}
}

func TestHungServerIsUnavailableWithinTheRequestTimeout(t *testing.T) {
	proxy := testproxy.Start(t, srv.Addr)
	// connect_timeout: connections the pool dials while the network drops
	// everything give up, as they should in production.
	url := strings.Replace(srv.URL, srv.Addr, proxy.Addr, 1) + "&connect_timeout=1"
	d, err := NewDriver(newPoolURL(t, url), WithRequestTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	c, _ := NewClient(d)
	ctx := ctxT(t, 20*time.Second)
	key := dlocktest.Key(t)
	l, err := c.TryLock(ctx, key, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	proxy.Blackhole(testproxy.Upstream, true)
	proxy.Blackhole(testproxy.Downstream, true)
	for name, f := range map[string]func() error{
		"TryLock": func() error { _, err := c.TryLock(ctx, key+"x"); return err },
		"Extend":  func() error { return l.Extend(ctx, time.Minute) },
		"TTL":     func() error { _, err := l.TTL(ctx); return err },
		"Inspect": func() error { _, err := c.Inspect(ctx, key); return err },
	} {
		start := time.Now()
		err := f()
		el := time.Since(start)
		t.Logf("%s: %v after %v", name, err, el)
		if !errors.Is(err, dlock.ErrUnavailable) || errors.Is(err, dlock.ErrRefused) || el > 3*time.Second {
			t.Errorf("%s on a hung server: %v after %v, want ErrUnavailable within the 300ms request timeout", name, err, el)
		}
	}
	proxy.Blackhole(testproxy.Upstream, false)
	proxy.Blackhole(testproxy.Downstream, false)
	// Cut the connections that lost data (pgx's cancel requests among them,
	// which would wait 15s for an answer).
	proxy.Reset()
	// The pool's connections dialled during the fault give up within their
	// connect timeout; then the lock is released.
	for try := 0; ; try++ {
		err := l.Unlock(ctx)
		if err == nil {
			break
		}
		if !errors.Is(err, dlock.ErrUnavailable) || try == 20 {
			t.Fatalf("Unlock after the server answers again: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestAbandonedAcquisitionCannotLand(t *testing.T) {
	d := newDriver(t)
	ctx := ctxT(t, 30*time.Second)
	key := dlocktest.Key(t)
	req := driver.AcquireRequest{Key: key, Owner: "owner-a", TTL: time.Minute}
	if _, err := d.Acquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := d.Abandon(ctx, driver.Holding{Key: key, Owner: "owner-a", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Acquire(ctx, req); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("Acquire after Abandon: %v, want ErrNotObtained", err)
	}
	g, err := d.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: "owner-b", TTL: time.Minute})
	if err != nil {
		t.Fatalf("another owner after Abandon: %v", err)
	}
	// The mark outlives another holding of the key.
	if err := d.Release(ctx, driver.Holding{Key: key, Owner: "owner-b"}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Acquire(ctx, req); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("Acquire after Abandon and another holding: %v, want ErrNotObtained", err)
	}
	// Abandon and an attempt of the same owner racing, in either order: the
	// owner never ends up holding the key.
	for i := 0; i < 30; i++ {
		owner := fmt.Sprintf("racer-%d", i)
		h := driver.Holding{Key: key, Owner: owner, TTL: time.Minute}
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, _ = d.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: owner, TTL: time.Minute})
		}()
		go func() { defer wg.Done(); _ = d.Abandon(ctx, h) }()
		wg.Wait()
		info, err := d.Inspect(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if info.Held && info.Owner == owner {
			t.Fatalf("round %d: the abandoned owner holds the key", i)
		}
		if info.LastToken < g.Token {
			t.Fatalf("round %d: last token %d below %d", i, info.LastToken, g.Token)
		}
	}
}

func TestSweepRemovesOnlyLongDeadRows(t *testing.T) {
	d := newDriver(t)
	ctx := ctxT(t, 10*time.Second)
	live, dead, fresh := dlocktest.Key(t)+"live", dlocktest.Key(t)+"dead", dlocktest.Key(t)+"fresh"
	for _, k := range []string{live, dead, fresh} {
		if _, err := d.Acquire(ctx, driver.AcquireRequest{Key: k, Owner: "o", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	_ = d.Release(ctx, driver.Holding{Key: fresh, Owner: "o"})
	admin(t, "UPDATE dlock_locks SET expires_at = now() - interval '2 hours' WHERE key = $1", dead)
	if _, err := d.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	rows, _ := newPool(t).Query(ctx, "SELECT key FROM dlock_locks WHERE key = ANY($1)", []string{live, dead, fresh})
	for rows.Next() {
		var k string
		_ = rows.Scan(&k)
		keys[k] = true
	}
	if rows.Err() != nil || len(keys) != 2 || !keys[fresh] || !keys[live] {
		t.Fatalf("rows after Sweep: %v, %v; want %s and %s", keys, rows.Err(), fresh, live)
	}
	// A semaphore's permit and header go too, long after their expiry.
	s, _ := NewSemaphoreDriver(d.pool, 2)
	if _, err := s.Acquire(ctx, driver.AcquireRequest{Key: dead, Owner: "o", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	admin(t, "UPDATE dlock_locks_sem SET expires_at = now() - interval '2 hours' WHERE key = $1", dead)
	if _, err := d.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := newPool(t).QueryRow(ctx, "SELECT count(*) FROM dlock_locks_sem WHERE key = $1", dead).Scan(&n); err != nil || n != 0 {
		t.Fatalf("semaphore rows after Sweep: %d, %v", n, err)
	}
}

// TestInspectionCreatesNothing checks that with WithCreateTable an
// inspection (Inspect, List, ForceUnlock, of every kind) and Sweep create no
// table in a database without one, the inspections saying ErrNoTable, and that
// each kind of lock creates only the tables it uses.
func TestInspectionCreatesNothing(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	table := uniqueTable(t)
	d := newDriver(t, WithTable(table), WithCreateTable())
	sem, err := NewSemaphoreDriver(d.pool, 2, WithTable(table), WithCreateTable())
	if err != nil {
		t.Fatal(err)
	}
	fair, _ := NewFairDriver(d.pool, WithTable(table), WithCreateTable())
	pool := newPool(t)
	exist := func() []string {
		t.Helper()
		var names []string
		for _, n := range []string{table, table + "_token", table + "_sem", table + "_queue"} {
			var ok bool
			if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, n).Scan(&ok); err != nil {
				t.Fatal(err)
			}
			if ok {
				names = append(names, n)
			}
		}
		return names
	}
	for _, in := range []struct {
		name string
		in   driver.Inspector
	}{{"locks", d}, {"semaphores", sem}, {"fair locks", fair}} {
		if _, err := in.in.Inspect(ctx, "k"); !errors.Is(err, ErrNoTable) || !errors.Is(err, dlock.ErrRefused) {
			t.Errorf("%s: Inspect without the table: %v, want ErrNoTable", in.name, err)
		}
		if _, err := driver.List(ctx, in.in, "*"); !errors.Is(err, ErrNoTable) {
			t.Errorf("%s: List without the table: %v, want ErrNoTable", in.name, err)
		}
		if _, err := in.in.ForceUnlock(ctx, "k"); !errors.Is(err, ErrNoTable) {
			t.Errorf("%s: ForceUnlock without the table: %v, want ErrNoTable", in.name, err)
		}
	}
	if n, err := d.Sweep(ctx); err != nil || n != 0 {
		t.Errorf("Sweep without the tables: %d, %v", n, err)
	}
	if got := exist(); len(got) != 0 {
		t.Fatalf("inspection created %v", got)
	}
	take := func(c *Client) {
		t.Helper()
		l, err := c.TryLock(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	c, _ := NewClient(d)
	take(c)
	if got := strings.Join(exist(), " "); got != table+" "+table+"_token" {
		t.Errorf("a lock created %q, want the locks' table and the sequence", got)
	}
	if info, err := d.Inspect(ctx, "k"); err != nil || info.Waiters != driver.WaitersUnknown {
		t.Errorf("Inspect of a plain lock: %+v, %v; want Waiters WaitersUnknown", info, err)
	}
	if info, err := fair.Inspect(ctx, "k"); err != nil || info.Waiters != 0 {
		t.Errorf("fair Inspect before any fair lock: %+v, %v; want 0 waiters", info, err)
	}
	sc, _ := dlock.NewClient(sem)
	take(sc)
	if got := strings.Join(exist(), " "); got != table+" "+table+"_token "+table+"_sem" {
		t.Errorf("a semaphore created %q, want its own table too", got)
	}
	fc, _ := dlock.NewClient(fair)
	take(fc)
	if got := len(exist()); got != 4 {
		t.Errorf("a fair lock left %d of 4 tables", got)
	}
}
