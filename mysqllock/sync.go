package mysqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// Latches and double barriers (driver.SyncDriver) live in a table of their
// own, the Driver's table with "_sync" appended (created by Migrate): one row
// per latch (party ”), one header row per barrier in use (party ”) and one
// row per party's arrival, each with the time it lapses. Every change is one
// transaction that locks the name's row first. Their waiters poll.

var _ driver.SyncDriver = (*Driver)(nil)

// NewLatch returns the latch name in db's database (the DefaultTable's sync
// table), counting down from count and forgotten ttl after its last use (see
// dlock.NewLatch). It returns an error matching dlock.ErrInvalid for bad
// arguments; it does no I/O.
func NewLatch(db *sql.DB, name string, count int, ttl time.Duration) (*dlock.Latch, error) {
	d, err := NewDriver(db)
	if err != nil {
		return nil, err
	}
	return dlock.NewLatch(d, name, count, ttl)
}

// NewBarrier returns a party's handle on the double barrier name in db's
// database, for parties parties, each present ttl after its last renewal (see
// dlock.NewBarrier). It returns an error matching dlock.ErrInvalid for bad
// arguments; it does no I/O.
func NewBarrier(db *sql.DB, name string, parties int, ttl time.Duration) (*dlock.Barrier, error) {
	d, err := NewDriver(db)
	if err != nil {
		return nil, err
	}
	return dlock.NewBarrier(d, name, parties, ttl)
}

const (
	kindLatch   = "latch"
	kindBarrier = "barrier"
)

// syncTx runs f in a transaction.
func (d *Driver) syncTx(ctx context.Context, op string, f func(ctx context.Context, tx *sql.Tx) error) error {
	if d == nil {
		return errNilDriver
	}
	return d.do(ctx, op, func(ctx context.Context) error {
		tx, err := d.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		if err := f(ctx, tx); err != nil {
			return err
		}
		return tx.Commit()
	})
}

// head inserts the row of name (the empty party) unless it exists, locks it,
// and reads it: its n, count and open, and whether it lapsed.
func (d *Driver) head(ctx context.Context, tx *sql.Tx, kind, name string, n int) (cur, count int, open, lapsed bool, err error) {
	k, nm := lit(kind), lit(name)
	if _, err = tx.ExecContext(ctx, `INSERT INTO `+d.sync+` (kind, name, party, n, count, expires_at)
VALUES (`+k+`, `+nm+`, X'', `+num(int64(n))+`, `+num(int64(n))+`, `+now+`) ON DUPLICATE KEY UPDATE n = n`); err != nil {
		return
	}
	err = tx.QueryRowContext(ctx, `SELECT n, count, open, expires_at <= `+now+` FROM `+d.sync+`
WHERE kind = `+k+` AND name = `+nm+` AND party = X'' FOR UPDATE`).Scan(&cur, &count, &open, &lapsed)
	return
}

func syncMismatch(what, name string, stored, n int) error {
	return fmt.Errorf("%w: mysqllock: %s %q made with %d, this one with %d", driver.ErrConflict, what, name, stored, n)
}

// sweepSync removes a few rows that lapsed a while ago, of any name.
func (d *Driver) sweepSync(ctx context.Context, tx *sql.Tx) error {
	_, err := tx.ExecContext(ctx, `DELETE FROM `+d.sync+` WHERE expires_at < `+now+` - INTERVAL 1 MINUTE LIMIT 16`)
	return err
}

// CountDown implements driver.SyncDriver.
func (d *Driver) CountDown(ctx context.Context, name string, n int, ttl time.Duration) (int, error) {
	var left int
	err := d.syncTx(ctx, "count down", func(ctx context.Context, tx *sql.Tx) error {
		cur, count, _, lapsed, err := d.head(ctx, tx, kindLatch, name, n)
		if err != nil {
			return err
		}
		if lapsed {
			cur, count = n, n
		}
		if cur != n {
			return syncMismatch("latch", name, cur, n)
		}
		left = max(count-1, 0)
		if _, err := tx.ExecContext(ctx, `UPDATE `+d.sync+` SET n = `+num(int64(n))+`, count = `+num(int64(left))+`,
	expires_at = `+now+` + INTERVAL `+num(micros(ttl))+` MICROSECOND
WHERE kind = `+lit(kindLatch)+` AND name = `+lit(name)+` AND party = X''`); err != nil {
			return err
		}
		return d.sweepSync(ctx, tx)
	})
	return left, err
}

// LatchCount implements driver.SyncDriver.
func (d *Driver) LatchCount(ctx context.Context, name string, n int, ttl time.Duration) (int, error) {
	count := n
	err := d.syncTx(ctx, "latch count", func(ctx context.Context, tx *sql.Tx) error {
		var cur, c int
		where := ` WHERE kind = ` + lit(kindLatch) + ` AND name = ` + lit(name) + ` AND party = X'' AND expires_at > ` + now
		err := tx.QueryRowContext(ctx, `SELECT n, count FROM `+d.sync+where+` FOR UPDATE`).Scan(&cur, &c)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return nil
		case err != nil:
			return err
		case cur != n:
			return syncMismatch("latch", name, cur, n)
		}
		count = c
		_, err = tx.ExecContext(ctx, `UPDATE `+d.sync+` SET expires_at = `+now+` + INTERVAL `+num(micros(ttl))+` MICROSECOND`+where)
		return err
	})
	return count, err
}

// barrierHead locks and reads the barrier name after dropping its lapsed
// arrivals, and returns the parties present and whether it is open; a barrier
// without arrivals is shut and takes n.
func (d *Driver) barrierHead(ctx context.Context, tx *sql.Tx, name string, n int) (present int, open bool, err error) {
	cur, _, open, _, err := d.head(ctx, tx, kindBarrier, name, n)
	if err != nil {
		return 0, false, err
	}
	where := ` WHERE kind = ` + lit(kindBarrier) + ` AND name = ` + lit(name) + ` AND party <> X''`
	if _, err = tx.ExecContext(ctx, `DELETE FROM `+d.sync+where+` AND expires_at <= `+now); err != nil {
		return 0, false, err
	}
	if err = tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+d.sync+where).Scan(&present); err != nil {
		return 0, false, err
	}
	if present == 0 {
		return 0, false, nil
	}
	if cur != n {
		return 0, false, syncMismatch("barrier", name, cur, n)
	}
	return present, open, nil
}

// setHead writes the barrier's n and open, and keeps its row as long as its
// last arrival.
func (d *Driver) setHead(ctx context.Context, tx *sql.Tx, name string, n int, open bool) error {
	k, nm := lit(kindBarrier), lit(name)
	var last sql.NullString // not parsed: the DSN may lack parseTime
	if err := tx.QueryRowContext(ctx, `SELECT MAX(expires_at) FROM `+d.sync+` WHERE kind = `+k+` AND name = `+nm+` AND party <> X''`).Scan(&last); err != nil {
		return err
	}
	until := now
	if last.Valid {
		until = `GREATEST(` + now + `, CAST(` + lit(last.String) + ` AS DATETIME(6)))`
	}
	o := "0"
	if open {
		o = "1"
	}
	_, err := tx.ExecContext(ctx, `UPDATE `+d.sync+` SET n = `+num(int64(n))+`, open = `+o+`, expires_at = `+until+`
WHERE kind = `+k+` AND name = `+nm+` AND party = X''`)
	return err
}

// Arrive implements driver.SyncDriver.
func (d *Driver) Arrive(ctx context.Context, name, party string, n int, ttl time.Duration) (bool, error) {
	var open bool
	err := d.syncTx(ctx, "arrive", func(ctx context.Context, tx *sql.Tx) error {
		present, wasOpen, err := d.barrierHead(ctx, tx, name, n)
		if err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO `+d.sync+` (kind, name, party, n, expires_at)
VALUES (`+lit(kindBarrier)+`, `+lit(name)+`, `+lit(party)+`, `+num(int64(n))+`, `+now+` + INTERVAL `+num(micros(ttl))+` MICROSECOND)
ON DUPLICATE KEY UPDATE expires_at = `+now+` + INTERVAL `+num(micros(ttl))+` MICROSECOND`)
		if err != nil {
			return err
		}
		// One row affected: inserted; two: updated (a renewal).
		if rows, err := res.RowsAffected(); err != nil {
			return err
		} else if rows == 1 {
			present++
		}
		open = wasOpen || present >= n
		if err := d.setHead(ctx, tx, name, n, open); err != nil {
			return err
		}
		return d.sweepSync(ctx, tx)
	})
	return open, err
}

// Withdraw implements driver.SyncDriver.
func (d *Driver) Withdraw(ctx context.Context, name, party string, n int) (bool, error) {
	var open bool
	err := d.syncTx(ctx, "withdraw", func(ctx context.Context, tx *sql.Tx) error {
		var err error
		if _, open, err = d.barrierHead(ctx, tx, name, n); err != nil || open {
			return err
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM `+d.sync+` WHERE kind = `+lit(kindBarrier)+` AND name = `+lit(name)+` AND party = `+lit(party)+` AND party <> X''`)
		return err
	})
	return open, err
}

// Depart implements driver.SyncDriver.
func (d *Driver) Depart(ctx context.Context, name, party string, n int) (int, time.Duration, error) {
	var present int
	var lapse time.Duration
	err := d.syncTx(ctx, "depart", func(ctx context.Context, tx *sql.Tx) error {
		var err error
		if present, _, err = d.barrierHead(ctx, tx, name, n); err != nil || present == 0 {
			return err
		}
		where := ` WHERE kind = ` + lit(kindBarrier) + ` AND name = ` + lit(name)
		res, err := tx.ExecContext(ctx, `DELETE FROM `+d.sync+where+` AND party = `+lit(party)+` AND party <> X''`)
		if err != nil {
			return err
		}
		if rows, err := res.RowsAffected(); err != nil {
			return err
		} else if rows == 1 {
			present--
		}
		if present == 0 {
			_, err := tx.ExecContext(ctx, `DELETE FROM `+d.sync+where)
			return err
		}
		var us int64
		if err := tx.QueryRowContext(ctx, `SELECT TIMESTAMPDIFF(MICROSECOND, `+now+`, MIN(expires_at)) FROM `+d.sync+where+` AND party <> X''`).Scan(&us); err != nil {
			return err
		}
		lapse = max(time.Duration(us)*time.Microsecond, time.Millisecond)
		return nil
	})
	return present, lapse, err
}

// WatchSync implements driver.SyncDriver: it returns an error wrapping
// errors.ErrUnsupported, and the waiters of latches and barriers poll.
func (d *Driver) WatchSync(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	return nil, nil, fmt.Errorf("mysqllock: latches and barriers are polled: %w", errors.ErrUnsupported)
}
