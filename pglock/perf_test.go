package pglock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// listen returns a connection of its own LISTENing on the default table's
// channel, closed when the test ends.
func listen(t *testing.T) *pgx.Conn {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	conn, err := pgx.Connect(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, "LISTEN "+DefaultTable); err != nil {
		t.Fatal(err)
	}
	return conn
}

// A release notifies only when a waiting acquisition found the lock held
// since the last grant, and then on the waiter's Driver's channel alone: an
// uncontended cycle sends no NOTIFY (each costs the server a lock of the
// whole database at commit), a release with a waiter one, which a listener
// of the table's channel (or of another Driver's) does not receive; a
// waiter that gave up leaves no mark behind.
func TestReleaseNotifiesOnlyWhenWaitedFor(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	conn := listen(t)
	c := newClient(t, dlock.WithTTL(10*time.Second))
	quiet, waited := dlocktest.Key(t)+"-quiet", dlocktest.Key(t)+"-waited"
	for range 3 {
		l, err := c.Lock(ctx, quiet)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// A TryLock that finds the key held does not wait: no mark either.
	l, err := c.TryLock(ctx, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newClient(t).TryLock(ctx, quiet); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock of a held key: %v", err)
	}
	// Nor does a Lock that gives up waiting: it leaves the queue.
	if _, err := newClient(t).Lock(ctx, quiet, dlock.WithWait(50*time.Millisecond)); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("Lock of a held key: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// A Lock waiting when the release comes is woken by name.
	l, err = c.TryLock(ctx, waited)
	if err != nil {
		t.Fatal(err)
	}
	wd := newDriver(t)
	got := waitFor(t, clientOf(t, wd), waited)
	subscribed(t, wd, 1)
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	next := <-got
	if next == nil {
		t.FailNow()
	}
	// One notification on the waiter's Driver's channel. It wakes the waiter,
	// unless the waiter's own retry took the lock first (a loaded host: 1 run
	// in 20 under -race), and then finds no subscription left to count.
	if _, wakes, _ := wd.ListenerStats(); wakes > 1 {
		t.Errorf("the waiter was woken %d times by notifications, want at most 1", wakes)
	}
	// The next holder starts unmarked.
	if err := next.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l, err = c.Lock(ctx, waited)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// Notifications arrive in commit order: the first on the table's
	// channel is the end marker.
	admin(t, "SELECT pg_notify($1, 'end')", DefaultTable)
	if n, err := conn.WaitForNotification(ctx); err != nil || n.Payload != "end" {
		t.Errorf("notification %v, %v on the table's channel; want the end marker alone", n, err)
	}
}

// A Driver keeps its listening connection between waits that follow each
// other, and a waiter that subscribes to it after an attempt during which no
// notification of its key came is not woken for nothing.
func TestListenerOutlivesAWait(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	key := dlocktest.Key(t)
	h := newClient(t, dlock.WithTTL(30*time.Second))
	wd := newDriver(t)
	wd.SetListenLinger(time.Minute)
	t.Cleanup(wd.StopListener)
	w, _ := NewClient(wd, dlock.WithTTL(30*time.Second))
	const waits = 3
	for i := range waits {
		if i > 0 {
			// The last wait's holding has let go of the connection, so that
			// the next count of one is the new waiter's subscription.
			subscribed(t, wd, 0)
		}
		l, err := h.TryLock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		_, wakes0, _ := wd.ListenerStats()
		got := waitFor(t, w, key)
		subscribed(t, wd, 1)
		if _, wakes, _ := wd.ListenerStats(); i > 0 && wakes != wakes0 {
			t.Errorf("wait %d: %d wakes before the release", i, wakes-wakes0)
		}
		if err := l.Unlock(ctx); err != nil {
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
	// Each wait is woken by its NOTIFY, save that on a loaded host a
	// waiter's own retry (its row was locked by the release's transaction
	// a moment) may take the lock just before the NOTIFY comes: once.
	if connects, wakes, subs := wd.ListenerStats(); connects != 1 || subs != 0 || wakes < waits-1 || wakes > waits {
		t.Errorf("%d waits: %d connections, %d wakes, %d subscriptions left; want 1, %d (or one fewer), 0", waits, connects, wakes, subs, waits)
	}
}

// maxAllocsPerCycle bounds the client's allocations per uncontended TryLock
// and Unlock (pgx's included): 49 when it was set, and a
// little room.
const maxAllocsPerCycle = 52

func TestAllocsPerCycle(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	c := newClient(t, dlock.WithTTL(10*time.Second))
	key := dlocktest.Key(t)
	var err error
	cycle := func() {
		var l *dlock.Lease
		if l, err = c.TryLock(ctx, key); err == nil {
			err = l.Unlock(ctx)
		}
	}
	cycle() // inserts the key's row, prepares the statements
	n := testing.AllocsPerRun(200, cycle)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%.1f allocations per uncontended TryLock and Unlock", n)
	if n > maxAllocsPerCycle {
		t.Errorf("%.1f allocations per uncontended cycle, want at most %d", n, maxAllocsPerCycle)
	}
}

// A locks' table made by an earlier layout (no column waited) is migrated,
// rows and tokens kept, by Migrate or by a call with CreateTable; without
// either, a call fails with an error matching ErrOldLayout and
// dlock.ErrRefused.
func TestOldLayoutTable(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	table := "old_layout_" + dlocktest.Key(t)[len(dlocktest.Key(t))-6:]
	for _, q := range []string{
		`CREATE SEQUENCE ` + table + `_token AS bigint`,
		`CREATE TABLE ` + table + ` (
			key             text        PRIMARY KEY,
			owner           text        NOT NULL,
			token           bigint      NOT NULL UNIQUE,
			expires_at      timestamptz NOT NULL,
			metadata        text        NOT NULL DEFAULT '',
			abandoned       text[]      NOT NULL DEFAULT '{}',
			abandoned_until timestamptz NOT NULL DEFAULT '-infinity')`,
		`INSERT INTO ` + table + ` (key, owner, token, expires_at) VALUES ('old', '', 1000, clock_timestamp())`,
		`SELECT setval('` + table + `_token', 1000)`,
	} {
		admin(t, q)
	}
	c := clientOf(t, newDriver(t, WithTable(table)))
	_, err := c.TryLock(ctx, "old")
	if !errors.Is(err, ErrOldLayout) || !errors.Is(err, dlock.ErrRefused) {
		t.Fatalf("TryLock on a table of the old layout: %v; want ErrOldLayout", err)
	}
	t.Log(err)
	l, err := clientOf(t, newDriver(t, WithTable(table), WithCreateTable())).TryLock(ctx, "old")
	if err != nil {
		t.Fatalf("TryLock with CreateTable on a table of the old layout: %v", err)
	}
	if l.Token() <= 1000 {
		t.Errorf("token %d after the migration, want more than the row's 1000", l.Token())
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	d := newDriver(t, WithTable(table))
	if err := d.Migrate(ctx); err != nil {
		t.Fatalf("Migrate of a migrated table: %v", err)
	}
}

// A locks' table of the layout before lock-delays (with the column waited,
// without lock_delay and delay_until) is refused as ErrOldLayout without
// CreateTable, and migrated, its rows and tokens kept, with it.
func TestLayoutBeforeLockDelay(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	table := "pre_delay_" + dlocktest.Key(t)[len(dlocktest.Key(t))-6:]
	for _, q := range []string{
		`CREATE SEQUENCE ` + table + `_token AS bigint`,
		`CREATE TABLE ` + table + ` (
			key             text        PRIMARY KEY,
			owner           text        NOT NULL,
			token           bigint      NOT NULL UNIQUE,
			expires_at      timestamptz NOT NULL,
			metadata        text        NOT NULL DEFAULT '',
			abandoned       text[]      NOT NULL DEFAULT '{}',
			abandoned_until timestamptz NOT NULL DEFAULT '-infinity',
			waited          boolean     NOT NULL DEFAULT false)`,
		`INSERT INTO ` + table + ` (key, owner, token, expires_at) VALUES ('old', '', 1000, clock_timestamp())`,
		`SELECT setval('` + table + `_token', 1000)`,
	} {
		admin(t, q)
	}
	if _, err := clientOf(t, newDriver(t, WithTable(table))).TryLock(ctx, "old"); !errors.Is(err, ErrOldLayout) || !errors.Is(err, dlock.ErrRefused) {
		t.Fatalf("TryLock on a table without lock_delay: %v; want ErrOldLayout", err)
	}
	l, err := clientOf(t, newDriver(t, WithTable(table), WithCreateTable())).TryLock(ctx, "old", dlock.WithLockDelay(time.Second))
	if err != nil {
		t.Fatalf("TryLock with CreateTable on a table without lock_delay: %v", err)
	}
	if l.Token() <= 1000 {
		t.Errorf("token %d after the migration, want more than the row's 1000", l.Token())
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// A locks' table of the layout before the queue of waiters (0.1.0: with
// lock_delay and delay_until, without waiters) is refused as ErrOldLayout
// without CreateTable, and migrated by Migrate, its rows and tokens kept; a
// waiter of a Driver of that version (which marks the row waited) is still
// woken by a release.
func TestLayoutBeforeWaiterQueue(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	table := "pre_queue_" + dlocktest.Key(t)[len(dlocktest.Key(t))-6:]
	for _, q := range []string{
		`CREATE SEQUENCE ` + table + `_token AS bigint`,
		`CREATE TABLE ` + table + ` (
			key             text        PRIMARY KEY,
			owner           text        NOT NULL,
			token           bigint      NOT NULL UNIQUE,
			expires_at      timestamptz NOT NULL,
			metadata        text        NOT NULL DEFAULT '',
			abandoned       text[]      NOT NULL DEFAULT '{}',
			abandoned_until timestamptz NOT NULL DEFAULT '-infinity',
			waited          boolean     NOT NULL DEFAULT false,
			lock_delay      bigint      NOT NULL DEFAULT 0,
			delay_until     timestamptz NOT NULL DEFAULT '-infinity')`,
		`INSERT INTO ` + table + ` (key, owner, token, expires_at) VALUES ('old', '', 1000, clock_timestamp())`,
		`SELECT setval('` + table + `_token', 1000)`,
	} {
		admin(t, q)
	}
	c := clientOf(t, newDriver(t, WithTable(table)))
	if _, err := c.TryLock(ctx, "old"); !errors.Is(err, ErrOldLayout) || !errors.Is(err, dlock.ErrRefused) {
		t.Fatalf("TryLock on a table without waiters: %v; want ErrOldLayout", err)
	}
	if err := newDriver(t, WithTable(table)).Migrate(ctx); err != nil {
		t.Fatalf("Migrate of a table without waiters: %v", err)
	}
	l, err := c.TryLock(ctx, "old")
	if err != nil {
		t.Fatalf("TryLock after the migration: %v", err)
	}
	if l.Token() <= 1000 {
		t.Errorf("token %d after the migration, want more than the row's 1000", l.Token())
	}
	// A waiter of the earlier version marks the row; the release wakes every
	// waiter of the key, as that version's did.
	conn, err := pgx.Connect(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+table); err != nil {
		t.Fatal(err)
	}
	admin(t, "UPDATE "+table+" SET waited = true WHERE key = 'old'")
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := conn.WaitForNotification(ctx); err != nil || n.Payload != "old" {
		t.Errorf("release of a row an earlier version's waiter marked: notification %v, %v; want the key", n, err)
	}
}

// An acquisition attempt keeps the Driver's listening connection while it
// runs: a Driver that lets go of its last holding while an attempt of its
// own waits at the server (a row locked a moment, a loaded server) does not
// close the connection under it and set up a new one for the attempt's
// holding. (It did: the linger ran out during the attempt, and on a loaded
// server every such gap cost a backend and a wake-up of every waiter.)
func TestAttemptKeepsTheListener(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	d := newDriver(t)
	c := clientOf(t, d, dlock.WithTTL(30*time.Second))
	held, busy := dlocktest.Key(t)+"-held", dlocktest.Key(t)+"-busy"
	// busy's row exists, free.
	l, err := c.TryLock(ctx, busy)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	admin := newPool(t)
	for try := 0; try < 5; try++ {
		if attemptOutlastsLinger(t, ctx, d, c, admin, held, busy) {
			return
		}
	}
	t.Fatal("in 5 tries, no attempt waited for the row until the row was let go")
}

// attemptOutlastsLinger has c hold held, and its attempt on busy wait for
// a transaction that holds busy's row while the holding of held goes and for
// three lingers more; it checks that the listening connection stayed, and
// reports whether the attempt waited so (a loaded host may end it sooner).
func attemptOutlastsLinger(t *testing.T, ctx context.Context, d *Driver, c *Client, admin *pgxpool.Pool, held, busy string) bool {
	t.Helper()
	l, err := c.TryLock(ctx, held) // its holding keeps the connection
	if err != nil {
		t.Fatal(err)
	}
	listening(t, d)
	connects, _, _ := d.ListenerStats()
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, "SELECT 1 FROM "+DefaultTable+" WHERE key = $1 FOR UPDATE", busy); err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *dlock.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := c.TryLock(ctx, busy)
		got <- result{l, err}
	}()
	// The attempt waits for the row (it gives up after 200 ms).
	waiting := false
	for i := 0; i < 200 && !waiting; i++ {
		var n int
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%"+DefaultTable+"%'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		waiting = n > 0
		if !waiting {
			time.Sleep(time.Millisecond)
		}
	}
	// The holding goes while the attempt waits; the attempt outlasts the
	// linger (20 ms in the tests) three times over.
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(60 * time.Millisecond)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if errors.Is(r.err, dlock.ErrNotObtained) {
		return false // the wait for the row ran out first
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer func() {
		if err := r.l.Unlock(ctx); err != nil {
			t.Error(err)
		}
	}()
	if !waiting {
		return false
	}
	listening(t, d) // the holding's connection, new or not
	if now, _, _ := d.ListenerStats(); now != connects {
		t.Errorf("the listening connection was set up %d more times during the attempt; want none", now-connects)
	}
	return true
}
