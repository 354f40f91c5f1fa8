package mysqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// delayLeft is the µs left of the row's lock-delay, 0 when it is in none.
const delayLeft = `IF(delay_until > ` + now + ` OR (owner <> X'' AND expires_at <= ` + now + ` AND expires_at + INTERVAL lock_delay MICROSECOND > ` + now + `),
	TIMESTAMPDIFF(MICROSECOND, ` + now + `, GREATEST(delay_until, IF(owner <> X'' AND lock_delay > 0, expires_at + INTERVAL lock_delay MICROSECOND, delay_until))), 0)`

// inspectColumns are the columns an inspection reads of a row of the locks'
// table: owner, token, metadata, µs left, whether it is held, µs left of its
// lock-delay.
const inspectColumns = `owner, token, metadata, GREATEST(0, TIMESTAMPDIFF(MICROSECOND, ` + now + `, expires_at)),
	owner <> X'' AND expires_at > ` + now + `, ` + delayLeft

// row is one row of an inspection.
type row struct {
	owner, meta      string
	token, us, delay int64
	held             bool
}

// info is the LockInfo of key's row r, held as a lock of kind.
func (r row) info(key, kind string) driver.LockInfo {
	info := driver.LockInfo{Key: key, Waiters: driver.WaitersUnknown, LastToken: uint64(max(r.token, 0)),
		DelayLeft: time.Duration(r.delay) * time.Microsecond}
	if r.held {
		info.Held, info.Owner, info.Token, info.Metadata = true, r.owner, uint64(r.token), r.meta
		info.TTL, info.Holders, info.Limit, info.Kind = time.Duration(r.us)*time.Microsecond, 1, 1, kind
	}
	return info
}

// Inspect implements driver.Inspector: the key's row as the server sees it
// now. LastToken is the key's newest token, also after its holding ended.
// An inspection never creates a table: in a database without one it returns
// an error matching ErrNoTable. Waiters is driver.WaitersUnknown: the row
// names the Drivers that wait, not their waiters.
func (d *Driver) Inspect(ctx context.Context, key string) (driver.LockInfo, error) {
	if d == nil {
		return driver.LockInfo{Key: key}, errNilDriver
	}
	return d.inspect(ctx, key, driver.KindMutex)
}

// inspect is Inspect of a lock of kind; a fair lock's Waiters are its live
// queue entries.
func (d *Driver) inspect(ctx context.Context, key, kind string) (driver.LockInfo, error) {
	if err := driver.ValidateKey(key); err != nil {
		return driver.LockInfo{Key: key}, err
	}
	var r row
	waiters := -1
	err := d.doOn(ctx, "inspect", false, func(ctx context.Context) error {
		r = row{}
		err := d.db.QueryRowContext(ctx, `SELECT `+inspectColumns+` FROM `+d.table+` WHERE lock_key = `+lit(key)).
			Scan(&r.owner, &r.token, &r.meta, &r.us, &r.held, &r.delay)
		if errors.Is(err, sql.ErrNoRows) {
			err = nil
		}
		if err == nil && kind == driver.KindFair {
			err = d.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+d.fair+` WHERE lock_key = `+lit(key)+` AND expires_at > `+now).Scan(&waiters)
		}
		return err
	})
	if err != nil {
		return driver.LockInfo{Key: key}, err
	}
	info := r.info(key, kind)
	if waiters >= 0 {
		info.Waiters = waiters
	}
	return info, nil
}

// ListPrefix implements driver.Inspector: the held locks (and those in their
// lock-delay) whose keys start with prefix.
func (d *Driver) ListPrefix(ctx context.Context, prefix string) ([]driver.LockInfo, error) {
	if d == nil {
		return nil, errNilDriver
	}
	return d.list(ctx, prefix, driver.KindMutex)
}

// list is ListPrefix of locks of kind.
func (d *Driver) list(ctx context.Context, prefix, kind string) ([]driver.LockInfo, error) {
	var out []driver.LockInfo
	err := d.doOn(ctx, "list", false, func(ctx context.Context) error {
		out = out[:0]
		rows, err := d.db.QueryContext(ctx, `SELECT lock_key, `+inspectColumns+` FROM `+d.table+`
WHERE (owner <> X'' AND (expires_at > `+now+` OR lock_delay > 0) OR delay_until > `+now+`)
	AND LEFT(lock_key, `+strconv.Itoa(len(prefix))+`) = `+lit(prefix))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var key string
			var r row
			if err := rows.Scan(&key, &r.owner, &r.token, &r.meta, &r.us, &r.held, &r.delay); err != nil {
				return err
			}
			if r.held || r.delay > 0 {
				out = append(out, r.info(key, kind))
			}
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ForceUnlock implements driver.Inspector: one transaction frees the key's
// holding, whoever holds it (starting its lock-delay, if it has one), and
// takes every waiter out of the row; then the holder's Driver (whose Lease is
// lost at once) and the waiters' are woken by KILL QUERY. It waits for a
// transaction fenced on the key (see Fence). A free lock is dlock.ErrNotHeld.
func (d *Driver) ForceUnlock(ctx context.Context, key string) (driver.LockInfo, error) {
	if d == nil {
		return driver.LockInfo{Key: key}, errNilDriver
	}
	return d.forceUnlock(ctx, key, driver.KindMutex)
}

// forceUnlock is ForceUnlock of a lock of kind: a fair lock's holder, its
// Driver's waiters and the head of its queue are woken.
func (d *Driver) forceUnlock(ctx context.Context, key, kind string) (driver.LockInfo, error) {
	if err := driver.ValidateKey(key); err != nil {
		return driver.LockInfo{Key: key}, err
	}
	var r row
	var holder, next int64
	var waiters string
	found := false
	err := d.doOn(ctx, "force unlock", false, func(ctx context.Context) error {
		found = false
		tx, err := d.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		head := "0"
		if kind == driver.KindFair {
			head = `COALESCE(` + d.queueHead("conn", key) + `, 0)`
		}
		err = tx.QueryRowContext(ctx, `SELECT `+inspectColumns+`, holder_conn, waiters, `+head+` FROM `+d.table+`
WHERE lock_key = `+lit(key)+` AND owner <> X'' AND expires_at > `+now+` FOR UPDATE`).
			Scan(&r.owner, &r.token, &r.meta, &r.us, &r.held, &r.delay, &holder, &waiters, &next)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE `+d.table+` SET expires_at = `+now+`, metadata = X'',
	delay_until = `+now+` + INTERVAL lock_delay MICROSECOND, holder_conn = 0, waiters = X'', owner = X''
WHERE lock_key = `+lit(key)); err != nil {
			return err
		}
		found = true
		return tx.Commit()
	})
	if err != nil {
		return driver.LockInfo{Key: key}, err
	}
	if !found {
		return driver.LockInfo{Key: key, Waiters: driver.WaitersUnknown}, fmt.Errorf("%w: mysqllock: %q is free", driver.ErrNotHeld, key)
	}
	if next != 0 {
		waiters += "," + num(next)
	}
	d.killAll(ctx, holder, waiters)
	return r.info(key, kind), nil
}

// killAll interrupts the sleeping connections holder and those of the
// comma-separated list waiters, ignoring failures.
func (d *Driver) killAll(ctx context.Context, holder int64, waiters string) {
	ids := []int64{holder}
	for _, s := range strings.Split(waiters, ",") {
		if id, err := strconv.ParseInt(s, 10, 64); err == nil {
			ids = append(ids, id)
		}
	}
	seen := map[int64]bool{}
	for _, id := range ids {
		if id > 0 && !seen[id] {
			seen[id] = true
			_ = d.do(ctx, "wake", func(ctx context.Context) error {
				_, err := d.db.ExecContext(ctx, "KILL QUERY "+num(id))
				return err
			})
		}
	}
}
