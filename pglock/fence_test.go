package pglock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

// fenceTable creates a table of writes for a test.
func fenceTable(t *testing.T) string {
	t.Helper()
	table := uniqueTable(t)
	admin(t, "CREATE TABLE "+table+" (n int, token bigint)")
	return table
}

func countRows(t *testing.T, table string) int {
	t.Helper()
	var n int
	if err := newPool(t).QueryRow(ctxT(t, 5*time.Second), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// fencedInsert inserts (n, the lease's token) into table in a transaction
// fenced by lease.
func fencedInsert(ctx context.Context, d *Driver, pool *pgxpool.Pool, table string, lease *dlock.Lease, n int) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := d.Fence(ctx, tx, lease); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "INSERT INTO "+table+" VALUES ($1, $2)", n, int64(lease.Token()))
		return err
	})
}

func TestFenceCommitsWhileHeldAndRefusesALostLease(t *testing.T) {
	table := fenceTable(t)
	key := dlocktest.Key(t)
	pool := newPool(t)
	d, _ := NewDriver(pool)
	var stale staleEvents
	c, _ := NewClient(d, dlock.WithObserver(&stale))
	ctx := ctxT(t, 30*time.Second)
	lease, err := c.TryLock(ctx, key, dlock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	err = fencedInsert(ctx, d, pool, table, lease, 1)
	if err != nil {
		t.Fatalf("fenced write of a holder: %v", err)
	}
	// The lease runs out and another holder takes the key.
	<-lease.Done()
	next, err := newClient(t).Lock(ctx, key, dlock.WithWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	err = fencedInsert(ctx, d, pool, table, lease, 2)
	if !errors.Is(err, dlock.ErrNotHeld) || !errors.Is(err, dlock.ErrStaleToken) {
		t.Fatalf("fenced write after a takeover: %v, want ErrNotHeld and ErrStaleToken", err)
	}
	// The refusal reached the lost lease's Observer.
	if got, want := stale.String(), fmt.Sprintf("[%s %d<%d]", key, lease.Token(), next.Token()); got != want {
		t.Errorf("stale-token events %s, want %s", got, want)
	}
	// Released: not held, no newer token.
	if err := next.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return d.Fence(ctx, tx, next) })
	if !errors.Is(err, dlock.ErrNotHeld) || errors.Is(err, dlock.ErrStaleToken) {
		t.Fatalf("fence of a released lease: %v, want ErrNotHeld only", err)
	}
	if n := countRows(t, table); n != 1 {
		t.Fatalf("%d rows written, want the holder's one", n)
	}
}

// A fenced transaction holds off the next holder until it ends, even when the
// lease expires meanwhile; the holder's renewals are not held off.
func TestFenceHoldsOffTheNextHolderUntilCommit(t *testing.T) {
	table := fenceTable(t)
	key := dlocktest.Key(t)
	pool := newPool(t)
	d, _ := NewDriver(pool)
	c, _ := NewClient(d)
	ctx := ctxT(t, 30*time.Second)
	const ttl = 400 * time.Millisecond
	lease, err := c.TryLock(ctx, key, dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := d.Fence(ctx, tx, lease); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := lease.Extend(ctx, ttl); err != nil || time.Since(start) > time.Second {
		t.Fatalf("Extend during a fenced transaction: %v after %v", err, time.Since(start))
	}
	got := waitFor(t, newClient(t), key)
	<-lease.Done() // expired: the holder is told
	time.Sleep(ttl / 2)
	select {
	case <-got:
		t.Fatal("the next holder got the key while a fenced transaction was open")
	default:
	}
	if _, err := tx.Exec(ctx, "INSERT INTO "+table+" VALUES (1, $1)", lease.Token()); err != nil {
		t.Fatal(err)
	}
	committed := time.Now()
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit of the fenced transaction: %v", err)
	}
	select {
	case next := <-got:
		t.Logf("next holder in %v after the commit (lease expired %v before it)", time.Since(committed), committed.Sub(lease.Deadline()))
		if next == nil || next.Token() <= lease.Token() {
			t.Fatalf("next holder %v", next)
		}
		_ = next.Unlock(ctx)
	case <-time.After(15 * time.Second):
		t.Fatal("next holder never got the key after the commit")
	}
}

func TestFenceSQL(t *testing.T) {
	table := fenceTable(t)
	key := dlocktest.Key(t)
	db := sql.OpenDB(stdlib.GetPoolConnector(newPool(t)))
	defer db.Close()
	d := newDriver(t)
	c, _ := NewClient(d)
	ctx := ctxT(t, 30*time.Second)
	lease, err := c.TryLock(ctx, key, dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	write := func(n int) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		if err := d.FenceSQL(ctx, tx, lease); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+table+" VALUES ($1, $2)", n, int64(lease.Token())); err != nil {
			return err
		}
		return tx.Commit()
	}
	if err := write(1); err != nil {
		t.Fatalf("fenced write through database/sql: %v", err)
	}
	if _, err := d.ForceUnlock(ctx, key); err != nil {
		t.Fatal(err)
	}
	if err := write(2); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("fenced write after a forced unlock: %v, want ErrNotHeld", err)
	}
	if n := countRows(t, table); n != 1 {
		t.Fatalf("%d rows written, want 1", n)
	}
}

// Fence works the same from a Lease of a Client made by New, which also
// inspects through its driver.
func TestFenceOfALeaseFromNew(t *testing.T) {
	pool := newPool(t)
	c, err := New(pool)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := NewDriver(pool)
	ctx := ctxT(t, 10*time.Second)
	lease, err := c.TryLock(ctx, dlocktest.Key(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lease.Unlock(context.Background()) }()
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return d.Fence(ctx, tx, lease) }); err != nil {
		t.Fatal(err)
	}
	// The Client reads the lock through its driver.
	if info, err := c.Inspect(ctx, lease.Key()); err != nil || !info.Held || info.Kind != driver.KindMutex || info.Token != lease.Token() {
		t.Fatalf("Inspect through the Client: %+v, %v", info, err)
	}
}

// A release and a forced unlock during a fenced transaction do not wait for
// it, but the grant that follows does: a TryLock finds the key busy.
func TestFenceReleaseDoesNotWaitButTheNextGrantDoes(t *testing.T) {
	key := dlocktest.Key(t)
	pool := newPool(t)
	d, _ := NewDriver(pool)
	c, _ := NewClient(d)
	ctx := ctxT(t, 30*time.Second)
	for _, force := range []bool{false, true} {
		lease, err := c.TryLock(ctx, key, dlock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Fence(ctx, tx, lease); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if force {
			_, err = newDriver(t).ForceUnlock(ctx, key)
		} else {
			err = lease.Unlock(ctx)
		}
		if err != nil || time.Since(start) > 2*time.Second {
			t.Fatalf("release (forced: %v) during a fenced transaction: %v after %v", force, err, time.Since(start))
		}
		// The grant waits a moment for the row, then reports the key busy
		// (within its bounded lock wait, well before the request timeout).
		start = time.Now()
		_, err = newDriver(t).Acquire(ctx, driver.AcquireRequest{Key: key, Owner: "next-" + strconv.FormatBool(force), TTL: time.Second})
		var busy *dlock.BusyError
		if !errors.As(err, &busy) || time.Since(start) > 2*time.Second {
			t.Fatalf("grant during a fenced transaction (forced: %v): %v after %v, want busy", force, err, time.Since(start))
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// staleEvents records the stale-token events an Observer receives.
type staleEvents struct {
	dlock.NopObserver
	mu  sync.Mutex
	got []string
}

func (s *staleEvents) StaleToken(_ context.Context, e dlock.StaleTokenEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, fmt.Sprintf("%s %d<%d", e.Resource, e.Token, e.Newest))
}

func (s *staleEvents) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprint(s.got)
}
