package mysqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// Latches and double barriers (driver.SyncDriver) live in a table of their
// own, the Driver's table with "_sync" appended (created by Migrate): one row
// per latch (party ”), one header row per barrier in use (party ”) and one
// row per party's arrival, each with the time it lapses. Every change is one
// transaction that locks the name's row first.
//
// Their waiters are woken at once, as the mutex's are: a waiting Driver writes
// a row of kind "watch" under the name, naming its sleeping connection, for as
// long as it waits (WatchSync). A change that waiters wait for (a latch's count
// reaching zero, a barrier opening, its last party leaving) reads those rows in
// its transaction, and after the commit sends KILL QUERY to each sleeping
// connection they name: one statement more in the change, and one per waiting
// Driver. A wake-up that is lost (a KILL between two waits) is made up for
// within WakeBackstop: the waiters look again that often.

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
	var ids []int64
	wake := false
	err := d.syncTx(ctx, "count down", func(ctx context.Context, tx *sql.Tx) error {
		ids, wake = nil, false
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
		if count == 1 {
			if ids, err = d.watchers(ctx, tx, name); err != nil {
				return err
			}
			wake = true
		}
		return d.sweepSync(ctx, tx)
	})
	if err == nil && wake {
		d.wakeWatchers(ctx, name, ids)
	}
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
	var open, wake bool
	var ids []int64
	err := d.syncTx(ctx, "arrive", func(ctx context.Context, tx *sql.Tx) error {
		ids, wake = nil, false
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
		if open && !wasOpen {
			if ids, err = d.watchers(ctx, tx, name); err != nil {
				return err
			}
			wake = true
		}
		if err := d.setHead(ctx, tx, name, n, open); err != nil {
			return err
		}
		return d.sweepSync(ctx, tx)
	})
	if err == nil && wake {
		d.wakeWatchers(ctx, name, ids)
	}
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
	var ids []int64
	wake := false
	err := d.syncTx(ctx, "depart", func(ctx context.Context, tx *sql.Tx) error {
		var err error
		ids, wake = nil, false
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
			if ids, err = d.watchers(ctx, tx, name); err != nil {
				return err
			}
			wake = true
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
	if err == nil && wake {
		d.wakeWatchers(ctx, name, ids)
	}
	return present, lapse, err
}

// kindWatch is the kind of the rows that name a waiting Driver's sleeping
// connection (party: its id, '/', a random tag of the waiter).
const kindWatch = "watch"

// watchTTL is the life of a waiter's watch row: a waiter removes its row when
// it stops waiting; one left behind by a process that died lapses and is
// swept. A waiter that waits longer is woken by its recheck.
const watchTTL = time.Hour

// syncKey is the key under which the waker subscribes the waiters of the
// latch or barrier name; no lock's key starts with 0x01.
func syncKey(name string) string { return "\x01sync " + name }

// WatchSync implements driver.SyncDriver: the waiter is woken when another
// Driver's change of the latch or barrier name sends KILL QUERY to this
// Driver's sleeping connection, which a row of the sync table names while the
// waiter waits (see the sync table above). With WithPolling, or without a
// sleeping connection, it returns an error and the waiter polls.
func (d *Driver) WatchSync(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	if d == nil {
		return nil, nil, errNilDriver
	}
	if d.cfg.poll {
		return nil, nil, fmt.Errorf("mysqllock: polling: %w", errors.ErrUnsupported)
	}
	conn, m := d.w.ensure(ctx)
	defer d.w.used()
	if conn == 0 {
		return nil, nil, errors.New("mysqllock: no sleeping connection: waiters poll")
	}
	ch, unsub, err := d.w.subscribe(driver.Holding{Key: syncKey(name), Handle: m})
	if err != nil {
		return nil, nil, err
	}
	k, nm, party := lit(kindWatch), lit(name), lit(num(conn)+"/"+strconv.FormatUint(rand.Uint64(), 16))
	if _, err := d.affected(ctx, "watch", `INSERT INTO `+d.sync+` (kind, name, party, n, expires_at)
VALUES (`+k+`, `+nm+`, `+party+`, 0, `+now+` + INTERVAL `+num(micros(watchTTL))+` MICROSECOND)`); err != nil {
		unsub()
		return nil, nil, err
	}
	// A KILL QUERY that comes between two waits of the sleeping connection
	// is lost: the waiter is also woken every WakeBackstop, as the mutex's
	// queued waiters try again.
	out, stop := make(chan struct{}, 1), make(chan struct{})
	go func() {
		tick := time.NewTicker(WakeBackstop)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ch:
			case <-tick.C:
			}
			select {
			case out <- struct{}{}:
			default:
			}
		}
	}()
	var once sync.Once
	return out, func() {
		once.Do(func() {
			close(stop)
			unsub()
			// Removed with a context of its own: the waiter's may have ended.
			ctx, cancel := context.WithTimeout(context.Background(), d.cfg.requestTimeout)
			defer cancel()
			_, _ = d.affected(ctx, "watch", `DELETE FROM `+d.sync+` WHERE kind = `+k+` AND name = `+nm+` AND party = `+party)
		})
	}, nil
}

// watchers reads, in a change's transaction, the sleeping connections of the
// Drivers that wait for name.
func (d *Driver) watchers(ctx context.Context, tx *sql.Tx, name string) ([]int64, error) {
	rows, err := tx.QueryContext(ctx, `SELECT DISTINCT CAST(SUBSTRING_INDEX(party, '/', 1) AS UNSIGNED) FROM `+d.sync+`
WHERE kind = `+lit(kindWatch)+` AND name = `+lit(name)+` AND expires_at > `+now)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// wakeWatchers wakes, after a committed change of name, the Driver's own
// waiters of name and those of the Drivers whose sleeping connections ids
// are. A connection that is gone has its watch rows of name removed.
// Failures are not the caller's: the waiters recheck.
func (d *Driver) wakeWatchers(ctx context.Context, name string, ids []int64) {
	d.w.wakeKey(syncKey(name))
	own := d.w.sleeperID()
	for _, id := range ids {
		if id == own {
			continue
		}
		err := d.do(ctx, "wake", func(ctx context.Context) error {
			_, err := d.db.ExecContext(ctx, "KILL QUERY "+num(id))
			return err
		})
		if errorNumber(err) == errUnknownThread {
			_, _ = d.affected(ctx, "wake", `DELETE FROM `+d.sync+` WHERE kind = `+lit(kindWatch)+` AND name = `+lit(name)+`
AND party LIKE `+lit(num(id)+"/%"))
		}
	}
}
