package mysqllock

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/driver"
	"github.com/go-sql-driver/mysql"
)

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// admin runs q on the test server as root and fails the test on an error.
func admin(t testing.TB, q string, args ...any) {
	t.Helper()
	if _, err := newDB(t).ExecContext(ctxT(t, 10*time.Second), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// dsnAs returns the test server's DSN for user with password, in database db.
func dsnAs(t testing.TB, user, password, db string) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.User, cfg.Passwd, cfg.DBName = user, password, db
	return cfg.FormatDSN()
}

func TestBadInputIsInvalid(t *testing.T) {
	if _, err := NewDriver(nil); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("NewDriver(nil): %v", err)
	}
	if _, err := New(nil); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("New(nil): %v", err)
	}
	if _, err := NewClient(nil); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("NewClient(nil): %v", err)
	}
	db := newDB(t)
	for _, table := range []string{"", "1x", "a.b.c", "dlock-locks", "x`y", strings.Repeat("t", 60)} {
		if _, err := NewDriver(db, WithTable(table)); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("WithTable(%q): %v", table, err)
		}
	}
	if _, err := NewDriver(db, WithRequestTimeout(0)); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("WithRequestTimeout(0): %v", err)
	}
	if _, err := NewDriver(db, nil); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("a nil option: %v", err)
	}
	for _, n := range []int{0, -2, MaxPermits + 1} {
		if _, err := NewSemaphore(db, n); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("NewSemaphore(%d): %v", n, err)
		}
	}
	var nilDriver *Driver
	if _, err := nilDriver.Acquire(context.Background(), driver.AcquireRequest{}); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Acquire of a nil Driver: %v", err)
	}
}

// TestKeyLongerThanTheColumnIsInvalid: a table made by hand whose key column
// is shorter than a key refuses it with ErrInvalid, not a refusal nor a
// truncated key.
func TestKeyLongerThanTheColumnIsInvalid(t *testing.T) {
	admin(t, "DROP TABLE IF EXISTS narrow_locks")
	d := newDriver(t, WithTable("narrow_locks"))
	if err := d.Migrate(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	admin(t, "ALTER TABLE narrow_locks MODIFY lock_key VARBINARY(16) NOT NULL")
	c := clientOf(t, d)
	_, err := c.TryLock(ctxT(t, 10*time.Second), strings.Repeat("k", 17))
	if !errors.Is(err, dlock.ErrInvalid) {
		t.Fatalf("a key of 17 bytes in a column of 16: %v, want ErrInvalid", err)
	}
	l, err := c.TryLock(ctxT(t, 10*time.Second), strings.Repeat("k", 16))
	if err != nil {
		t.Fatalf("a key of 16 bytes: %v", err)
	}
	_ = l.Unlock(context.Background())
}

// TestMissingTableIsRefusedAndCreatedOnDemand: without the table a lock is
// refused with ErrNoTable, and an inspection too, creating nothing; with
// WithCreateTable the first lock creates it.
func TestMissingTableIsRefusedAndCreatedOnDemand(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	admin(t, "DROP TABLE IF EXISTS fresh_locks, fresh_locks_sem, fresh_locks_sync, fresh_locks_fair")
	db := newDB(t)
	d, _ := NewDriver(db, WithTable("fresh_locks"))
	c := clientOf(t, d)
	if _, err := c.TryLock(ctx, dlocktest.Key(t)); !errors.Is(err, ErrNoTable) || !errors.Is(err, dlock.ErrRefused) {
		t.Fatalf("TryLock without the table: %v, want ErrNoTable and ErrRefused", err)
	}
	if _, err := d.Inspect(ctx, "k"); !errors.Is(err, ErrNoTable) {
		t.Fatalf("Inspect without the table: %v", err)
	}
	if _, err := driver.List(ctx, d, "*"); !errors.Is(err, ErrNoTable) {
		t.Fatalf("List without the table: %v", err)
	}
	if _, err := d.ForceUnlock(ctx, "k"); !errors.Is(err, ErrNoTable) {
		t.Fatalf("ForceUnlock without the table: %v", err)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name LIKE 'fresh_locks%'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("tables after read-only calls: %d, %v", n, err)
	}
	created, _ := NewDriver(db, WithTable("fresh_locks"), WithCreateTable())
	l, err := clientOf(t, created).TryLock(ctx, dlocktest.Key(t))
	if err != nil {
		t.Fatalf("TryLock with WithCreateTable: %v", err)
	}
	_ = l.Unlock(ctx)
}

func TestForeignTableIsConflict(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	admin(t, "DROP TABLE IF EXISTS foreign_locks")
	admin(t, "CREATE TABLE foreign_locks (id INT PRIMARY KEY, name TEXT)")
	d := newDriver(t, WithTable("foreign_locks"))
	if err := d.Migrate(ctx); !errors.Is(err, dlock.ErrConflict) {
		t.Fatalf("Migrate over a foreign table: %v, want ErrConflict", err)
	}
	if _, err := clientOf(t, d).TryLock(ctx, dlocktest.Key(t)); !errors.Is(err, dlock.ErrConflict) {
		t.Fatalf("TryLock on a foreign table: %v, want ErrConflict", err)
	}
}

// TestMissingPrivilegeIsErrPermission: a user who may read the table but not
// write it gets ErrPermission (and ErrRefused) from a lock, and a wrong
// password too, whose text never appears in the error.
func TestMissingPrivilegeIsErrPermission(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	const password = "s3cret-Pa55"
	admin(t, "DROP USER IF EXISTS 'reader'@'127.0.0.1'")
	admin(t, "CREATE USER 'reader'@'127.0.0.1' IDENTIFIED BY '"+password+"'")
	admin(t, "GRANT SELECT ON dlock.* TO 'reader'@'127.0.0.1'")
	c := clientOf(t, newDriver(t))
	_ = c
	db, err := sql.Open("mysql", dsnAs(t, "reader", password, "dlock"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	reader, _ := New(db)
	_, err = reader.TryLock(ctx, dlocktest.Key(t))
	if !errors.Is(err, ErrPermission) || !errors.Is(err, dlock.ErrRefused) {
		t.Fatalf("TryLock without INSERT: %v, want ErrPermission and ErrRefused", err)
	}
	if _, err := reader.Inspect(ctx, "k"); err != nil {
		t.Fatalf("Inspect with SELECT: %v", err)
	}
	wrong, err := sql.Open("mysql", dsnAs(t, "reader", "not-"+password, "dlock"))
	if err != nil {
		t.Fatal(err)
	}
	defer wrong.Close()
	denied, _ := New(wrong)
	_, err = denied.TryLock(ctx, dlocktest.Key(t))
	if !errors.Is(err, ErrPermission) {
		t.Fatalf("TryLock with a wrong password: %v, want ErrPermission", err)
	}
	if strings.Contains(err.Error(), password) {
		t.Fatalf("the error shows the password: %v", err)
	}
}

// TestLostConnectionDuringAcquisitionHoldsNothingBeyondTheTTL: a connection
// killed by the server while the acquisition's statement waits leaves at
// most a holding that ends with its TTL.
func TestLostConnectionDuringAcquisitionHoldsNothingBeyondTheTTL(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	key := dlocktest.Key(t)
	const ttl = 300 * time.Millisecond
	probe := newDB(t)
	// A transaction of the probe holds the key's row, so the acquisition
	// waits on it: then its connection is killed.
	holder := newClient(t)
	first, err := holder.TryLock(ctx, key, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	_ = first.Unlock(ctx)
	tx, err := probe.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var locked string
	if err := tx.QueryRowContext(ctx, "SELECT lock_key FROM dlock_locks WHERE lock_key = ? FOR UPDATE", key).Scan(&locked); err != nil {
		t.Fatal(err)
	}
	db := newDB(t)
	db.SetMaxOpenConns(1) // the acquisition's connection is the only one
	d, _ := NewDriver(db, WithPolling())
	c := clientOf(t, d)
	done := make(chan error, 1)
	go func() {
		l, err := c.TryLock(ctx, key, dlock.WithTTL(ttl))
		if err == nil {
			_ = l
		}
		done <- err
	}()
	var id int64
	for end := time.Now().Add(10 * time.Second); id == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the acquisition never waited on the row")
		}
		_ = probe.QueryRowContext(ctx, "SELECT id FROM information_schema.processlist WHERE info LIKE 'INSERT INTO `dlock_locks`%' LIMIT 1").Scan(&id)
	}
	if _, err := probe.ExecContext(ctx, "KILL CONNECTION ?", id); err != nil {
		t.Fatal(err)
	}
	_ = tx.Rollback()
	if err := <-done; err == nil || !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("TryLock whose connection was killed: %v, want ErrUnavailable", err)
	}
	// Whatever the statement did, the key is free once the TTL has passed.
	time.Sleep(ttl + 50*time.Millisecond)
	info, err := d.Inspect(ctx, key)
	if err != nil || info.Held {
		t.Fatalf("the key %v after the TTL: %+v, %v", ttl, info, err)
	}
}

func TestForceUnlockTellsHolderAtOnce(t *testing.T) {
	d := newDriver(t)
	sem, err := NewSemaphoreDriver(newDB(t), 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []struct {
		name string
		drv  interface {
			driver.Driver
			driver.Inspector
		}
	}{{"mutex", d}, {"semaphore", sem}} {
		t.Run(k.name, func(t *testing.T) {
			c, err := dlock.NewClient(k.drv)
			if err != nil {
				t.Fatal(err)
			}
			took := dlocktest.PushedLoss(t, c, dlocktest.Key(t), 2*time.Second, func(ctx context.Context, l *dlock.Lease) (time.Time, error) {
				start := time.Now()
				_, err := k.drv.ForceUnlock(ctx, l.Key())
				return start, err
			})
			t.Logf("ForceUnlock to Done: %v", took)
		})
	}
}

// TestAbandonedAcquisitionCannotLand: after Abandon, an attempt of the same
// owner (one still in flight) is refused, and the key stays free.
func TestAbandonedAcquisitionCannotLand(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	d := newDriver(t)
	key := dlocktest.Key(t)
	r := driver.AcquireRequest{Key: key, Owner: "0123456789abcdef0123456789abcdef", TTL: time.Minute}
	if err := d.Abandon(ctx, driver.Holding{Key: key, Owner: r.Owner, TTL: r.TTL}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Acquire(ctx, r); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("an attempt after its abandonment: %v, want ErrNotObtained", err)
	}
	if info, err := d.Inspect(ctx, key); err != nil || info.Held {
		t.Fatalf("Inspect: %+v, %v", info, err)
	}
	// A holding abandoned is released, and its next attempt refused too.
	r.Owner = "fedcba9876543210fedcba9876543210"
	if _, err := d.Acquire(ctx, r); err != nil {
		t.Fatal(err)
	}
	if err := d.Abandon(ctx, driver.Holding{Key: key, Owner: r.Owner, TTL: r.TTL}); err != nil {
		t.Fatal(err)
	}
	if info, err := d.Inspect(ctx, key); err != nil || info.Held {
		t.Fatalf("Inspect after the holder's abandonment: %+v, %v", info, err)
	}
	if _, err := d.Acquire(ctx, r); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("a late attempt of an abandoned holding: %v, want ErrNotObtained", err)
	}
}

// TestTokensSurviveARestart: a key's tokens go on growing after the server
// was killed and started again.
func TestTokensSurviveARestart(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts the server")
	}
	ctx := ctxT(t, 60*time.Second)
	key := dlocktest.Key(t)
	c := newClient(t)
	var last uint64
	for range 3 {
		l, err := c.TryLock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		last = l.Token()
		_ = l.Unlock(ctx)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	c2 := newClient(t)
	l, err := c2.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Unlock(ctx) }()
	if l.Token() <= last {
		t.Fatalf("token %d after a restart, after %d", l.Token(), last)
	}
}
