package pglock

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Latches and double barriers (driver.SyncDriver) live in a table of their own,
// the Driver's table with "_sync" appended, created on first use: one row per
// latch (party ''), one header row per barrier in use (party '') and one row
// per party's arrival, each with the time it lapses. Every change is one
// transaction that locks the name's row first, and a change that can release
// waiters (a latch reaching zero, a barrier opening or emptying) sends a NOTIFY
// on the Driver's channel, which wakes the waiters of that name only.

var _ driver.SyncDriver = (*Driver)(nil)

// NewLatch returns the latch name in pool's database (the DefaultTable's sync
// table), counting down from count and forgotten ttl after its last use (see
// dlock.NewLatch). It returns an error matching dlock.ErrInvalid for bad
// arguments; it does no I/O.
func NewLatch(pool *pgxpool.Pool, name string, count int, ttl time.Duration) (*dlock.Latch, error) {
	d, err := NewDriver(pool)
	if err != nil {
		return nil, err
	}
	return dlock.NewLatch(d, name, count, ttl)
}

// NewBarrier returns a party's handle on the double barrier name in pool's
// database, for parties parties, each present ttl after its last renewal (see
// dlock.NewBarrier). It returns an error matching dlock.ErrInvalid for bad
// arguments; it does no I/O.
func NewBarrier(pool *pgxpool.Pool, name string, parties int, ttl time.Duration) (*dlock.Barrier, error) {
	d, err := NewDriver(pool)
	if err != nil {
		return nil, err
	}
	return dlock.NewBarrier(d, name, parties, ttl)
}

// syncTable returns the quoted name of the Driver's latch and barrier table.
func (d *Driver) syncTable() string {
	parts := strings.Split(d.cfg.table, ".")
	parts[len(parts)-1] += "_sync"
	return pgx.Identifier(parts).Sanitize()
}

// syncPayload is the NOTIFY payload, and the Subscribe key, of the latch and
// barrier name: a character no key holds keeps it apart from the locks'.
func syncPayload(name string) string { return "\x01sync " + name }

const (
	kindLatch   = "latch"
	kindBarrier = "barrier"
)

// syncTx runs f in a transaction, creating the table first when it is
// missing.
func (d *Driver) syncTx(ctx context.Context, op string, f func(ctx context.Context, tx pgx.Tx, t string) error) error {
	if d == nil {
		return errNilDriver
	}
	t := d.syncTable()
	return d.doOn(ctx, op, partNone, func(ctx context.Context) error {
		run := func() error {
			return pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error { return f(ctx, tx, t) })
		}
		err := run()
		if undefinedTable(err) {
			if _, err = d.pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+t+` (
	kind text NOT NULL,
	name text NOT NULL,
	party text NOT NULL,
	n integer NOT NULL,
	count integer NOT NULL DEFAULT 0,
	open boolean NOT NULL DEFAULT false,
	expires timestamptz NOT NULL,
	PRIMARY KEY (kind, name, party))`); err == nil || sqlState(err) == "23505" || sqlState(err) == "42P07" {
				err = run()
			}
		}
		return err
	})
}

// head inserts the row of name (the empty party) unless it exists, locks it, and
// reads it: its n, count and open, and whether it lapsed.
func head(ctx context.Context, tx pgx.Tx, t, kind, name string, n int) (cur, count int, open, lapsed bool, err error) {
	if _, err = tx.Exec(ctx, `INSERT INTO `+t+` (kind, name, party, n, count, expires)
VALUES ($1, $2, '', $3, $3, clock_timestamp()) ON CONFLICT DO NOTHING`, kind, name, n); err != nil {
		return
	}
	err = tx.QueryRow(ctx, `SELECT n, count, open, expires <= clock_timestamp() FROM `+t+`
WHERE kind = $1 AND name = $2 AND party = '' FOR UPDATE`, kind, name).Scan(&cur, &count, &open, &lapsed)
	return
}

func (d *Driver) notifySync(ctx context.Context, tx pgx.Tx, name string) error {
	_, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, d.channel, syncPayload(name))
	return err
}

func syncMismatch(what, name string, stored, n int) error {
	return fmt.Errorf("%w: pglock: %s %q made with %d, this one with %d", driver.ErrConflict, what, name, stored, n)
}

// sweepSync removes a few rows that lapsed a while ago, of any name.
func sweepSync(ctx context.Context, tx pgx.Tx, t string) error {
	_, err := tx.Exec(ctx, `DELETE FROM `+t+` WHERE ctid IN (SELECT ctid FROM `+t+`
WHERE expires < clock_timestamp() - interval '1 minute' LIMIT 16 FOR UPDATE SKIP LOCKED)`)
	return err
}

// CountDown implements driver.SyncDriver.
func (d *Driver) CountDown(ctx context.Context, name string, n int, ttl time.Duration) (int, error) {
	var left int
	err := d.syncTx(ctx, "count down", func(ctx context.Context, tx pgx.Tx, t string) error {
		cur, count, _, lapsed, err := head(ctx, tx, t, kindLatch, name, n)
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
		if _, err := tx.Exec(ctx, `UPDATE `+t+` SET n = $3, count = $4, expires = clock_timestamp() + $5 * interval '1 microsecond'
WHERE kind = $1 AND name = $2 AND party = ''`, kindLatch, name, n, left, micros(ttl)); err != nil {
			return err
		}
		if count == 1 {
			if err := d.notifySync(ctx, tx, name); err != nil {
				return err
			}
		}
		return sweepSync(ctx, tx, t)
	})
	return left, err
}

// LatchCount implements driver.SyncDriver.
func (d *Driver) LatchCount(ctx context.Context, name string, n int, ttl time.Duration) (int, error) {
	count := n
	err := d.syncTx(ctx, "latch count", func(ctx context.Context, tx pgx.Tx, t string) error {
		var cur, c int
		err := tx.QueryRow(ctx, `UPDATE `+t+` SET expires = clock_timestamp() + $3 * interval '1 microsecond'
WHERE kind = $1 AND name = $2 AND party = '' AND expires > clock_timestamp() RETURNING n, count`, kindLatch, name, micros(ttl)).Scan(&cur, &c)
		switch {
		case err == pgx.ErrNoRows:
			return nil
		case err != nil:
			return err
		case cur != n:
			return syncMismatch("latch", name, cur, n)
		}
		count = c
		return nil
	})
	return count, err
}

// barrierHead locks and reads the barrier name after dropping its lapsed
// arrivals, and returns the parties present and whether it is open; a barrier
// without arrivals is shut and takes n.
func barrierHead(ctx context.Context, tx pgx.Tx, t, name string, n int) (present int, open bool, err error) {
	cur, _, open, _, err := head(ctx, tx, t, kindBarrier, name, n)
	if err != nil {
		return 0, false, err
	}
	if _, err = tx.Exec(ctx, `DELETE FROM `+t+` WHERE kind = $1 AND name = $2 AND party <> '' AND expires <= clock_timestamp()`, kindBarrier, name); err != nil {
		return 0, false, err
	}
	if err = tx.QueryRow(ctx, `SELECT count(*) FROM `+t+` WHERE kind = $1 AND name = $2 AND party <> ''`, kindBarrier, name).Scan(&present); err != nil {
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
func setHead(ctx context.Context, tx pgx.Tx, t, name string, n int, open bool) error {
	_, err := tx.Exec(ctx, `UPDATE `+t+` SET n = $3, open = $4, expires = coalesce((SELECT max(expires) FROM `+t+`
WHERE kind = $1 AND name = $2 AND party <> ''), clock_timestamp()) WHERE kind = $1 AND name = $2 AND party = ''`, kindBarrier, name, n, open)
	return err
}

// Arrive implements driver.SyncDriver.
func (d *Driver) Arrive(ctx context.Context, name, party string, n int, ttl time.Duration) (bool, error) {
	var open bool
	err := d.syncTx(ctx, "arrive", func(ctx context.Context, tx pgx.Tx, t string) error {
		present, wasOpen, err := barrierHead(ctx, tx, t, name, n)
		if err != nil {
			return err
		}
		var fresh bool
		if err := tx.QueryRow(ctx, `INSERT INTO `+t+` (kind, name, party, n, expires)
VALUES ($1, $2, $3, $4, clock_timestamp() + $5 * interval '1 microsecond')
ON CONFLICT (kind, name, party) DO UPDATE SET expires = excluded.expires RETURNING xmax = 0`, kindBarrier, name, party, n, micros(ttl)).Scan(&fresh); err != nil {
			return err
		}
		if fresh {
			present++
		}
		open = wasOpen || present >= n
		if open && !wasOpen {
			if err := d.notifySync(ctx, tx, name); err != nil {
				return err
			}
		}
		if err := setHead(ctx, tx, t, name, n, open); err != nil {
			return err
		}
		return sweepSync(ctx, tx, t)
	})
	return open, err
}

// Withdraw implements driver.SyncDriver.
func (d *Driver) Withdraw(ctx context.Context, name, party string, n int) (bool, error) {
	var open bool
	err := d.syncTx(ctx, "withdraw", func(ctx context.Context, tx pgx.Tx, t string) error {
		var err error
		if _, open, err = barrierHead(ctx, tx, t, name, n); err != nil || open {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM `+t+` WHERE kind = $1 AND name = $2 AND party = $3`, kindBarrier, name, party)
		return err
	})
	return open, err
}

// Depart implements driver.SyncDriver.
func (d *Driver) Depart(ctx context.Context, name, party string, n int) (int, time.Duration, error) {
	var present int
	var lapse time.Duration
	err := d.syncTx(ctx, "depart", func(ctx context.Context, tx pgx.Tx, t string) error {
		var err error
		if present, _, err = barrierHead(ctx, tx, t, name, n); err != nil || present == 0 {
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM `+t+` WHERE kind = $1 AND name = $2 AND party = $3`, kindBarrier, name, party)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 1 {
			present--
		}
		if present == 0 {
			if _, err := tx.Exec(ctx, `DELETE FROM `+t+` WHERE kind = $1 AND name = $2`, kindBarrier, name); err != nil {
				return err
			}
			return d.notifySync(ctx, tx, name)
		}
		var us int64
		if err := tx.QueryRow(ctx, `SELECT (extract(epoch FROM min(expires) - clock_timestamp()) * 1e6)::bigint FROM `+t+`
WHERE kind = $1 AND name = $2 AND party <> ''`, kindBarrier, name).Scan(&us); err != nil {
			return err
		}
		lapse = max(time.Duration(us)*time.Microsecond, time.Millisecond)
		return nil
	})
	return present, lapse, err
}

// WatchSync implements driver.SyncDriver with the Driver's LISTEN connection
// (see Subscribe): a waiter wakes on the NOTIFY of its name and whenever the
// connection is (re)established. With WithPolling it returns an error and
// waiters poll.
func (d *Driver) WatchSync(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	return d.Subscribe(ctx, driver.Holding{Key: syncPayload(name)})
}
