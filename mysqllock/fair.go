package mysqllock

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// FairWaiterTTL is how long the queue entry of a fair-lock waiter lives
// without an attempt of its Lock; a waiting Lock writes it again at least
// every FairWaiterTTL/5. A waiter that dies leaves the queue after it, and is
// then no longer in the way of those behind it.
const FairWaiterTTL = 5 * time.Second

// fairRefresh is the age past which a waiter's attempt writes its queue entry
// again: a waiter that is not woken attempts every WakeBackstop, well within
// FairWaiterTTL.
const fairRefresh = FairWaiterTTL / 10

// FairDriver is the driver.Driver of fair locks: the exclusive locks of a
// table of locks, granted in arrival order. A waiting Lock that finds the key
// taken enters the key's queue (the locks' table with "_fair" appended,
// created by Migrate), whose AUTO_INCREMENT column, drawn by the server,
// orders the waiters; it keeps its place across attempts, writing its entry
// again at least every FairWaiterTTL/5. The lock goes to the oldest live entry
// of the queue, and TryLock does not take it while anybody queues. A release
// wakes the head's Driver at once (KILL QUERY of its sleeping connection, see
// the package's Waiting); an entry whose waiter stopped attempting is passed
// over after FairWaiterTTL. It is also a driver.Notifier, a driver.Abandoner
// (an abandoned Lock leaves the queue at once), a driver.Resumer, a
// driver.BatchExtender, a driver.LockDelayer and a driver.Inspector (with the
// queued waiters). Most users want NewFair.
//
// Fair and plain locks share the table: a fair lock's holder is a plain
// holder of the key's row, with the key's tokens, so that the two exclude each
// other; but a plain Client's Lock on a key that fair waiters queue for does
// not see the queue. Use one kind of Client per key.
//
// With WithPolling (or while the Driver cannot set up its sleeping
// connection) a queued waiter's Taken reports at most WakeBackstop as the
// holder's time left, so that its attempts keep its queue entry alive.
type FairDriver struct {
	d *Driver
}

var (
	_ driver.Driver        = (*FairDriver)(nil)
	_ driver.Notifier      = (*FairDriver)(nil)
	_ driver.Abandoner     = (*FairDriver)(nil)
	_ driver.Resumer       = (*FairDriver)(nil)
	_ driver.BatchExtender = (*FairDriver)(nil)
	_ driver.Inspector     = (*FairDriver)(nil)
	_ driver.TTLLimiter    = (*FairDriver)(nil)
	_ driver.LockDelayer   = (*FairDriver)(nil)
)

// NewFair returns a Client whose locks are granted in arrival order (see
// FairDriver), in the DefaultTable of db's database, with opts as the
// defaults of every call. It does no I/O: create the tables first with
// Driver.Migrate (or use NewFairDriver with WithCreateTable). It returns an
// error matching dlock.ErrInvalid for a nil db or a bad option.
func NewFair(db *sql.DB, opts ...dlock.Option) (*Client, error) {
	f, err := NewFairDriver(db)
	if err != nil {
		return nil, err
	}
	return dlock.NewClient(f, opts...)
}

// NewFairDriver returns the driver of fair locks over db, in the table that
// opts name (see NewDriver). It does no I/O. It returns an error matching
// dlock.ErrInvalid for a nil db or a bad option.
func NewFairDriver(db *sql.DB, opts ...Option) (*FairDriver, error) {
	d, err := NewDriver(db, opts...)
	if err != nil {
		return nil, err
	}
	return &FairDriver{d: d}, nil
}

// fairWait is the Handle of a fair waiter's Taken: the mark of its attempt
// (see Subscribe), and when the waiter last wrote its queue entry (zero when
// it has none).
type fairWait struct {
	m  mark
	at time.Time
}

// queueHead is a subquery: the column col of the live head of key's queue,
// NULL when nobody queues.
func (d *Driver) queueHead(col, key string) string {
	return `(SELECT q.` + col + ` FROM ` + d.fair + ` q WHERE q.lock_key = ` + lit(key) + ` AND q.expires_at > ` + now + ` ORDER BY q.seq LIMIT 1)`
}

// Info implements driver.Driver: the fair mutex of MySQL.
func (f *FairDriver) Info() driver.DriverInfo {
	return driver.DriverInfo{Backend: "mysqllock", Kind: driver.KindFair}
}

// TTLLimits implements driver.TTLLimiter, as Driver.TTLLimits.
func (f *FairDriver) TTLLimits() driver.TTLLimits { return driver.DefaultTTLLimits }

// MaxLockDelay implements driver.LockDelayer, as Driver.MaxLockDelay.
func (f *FairDriver) MaxLockDelay() time.Duration { return driver.MaxLockDelay }

// Acquire implements driver.Driver: one statement takes the key's row when it
// is free and nobody queues (or the owner heads the queue), or the owner's
// live holding again; otherwise a waiting Lock enters the queue and tries
// once more (a release between the two finds its entry and wakes it). A
// waiting Lock of a key that a waiter of the Driver found taken within the
// last second enters the queue before its first try. An owner granted after
// it queued leaves the queue in one more statement. A queued waiter's later
// attempts write its entry again when it is fairRefresh old, or when its
// Driver's sleeping connection changed.
func (f *FairDriver) Acquire(ctx context.Context, r driver.AcquireRequest) (driver.Grant, error) {
	if f == nil {
		return driver.Grant{}, errNilDriver
	}
	d := f.d
	conn, gen, used := d.wakeable(ctx)
	defer used()
	prev, _ := r.Handle.(fairWait)
	at := prev.at
	var code int64
	err := d.do(ctx, "acquire", func(ctx context.Context) error {
		var err error
		// A waiter enters the queue first when it queued long ago, or
		// when a waiter of the Driver found the key taken lately.
		if r.Waiting && (at.IsZero() && d.busy.has(r.Key) || !at.IsZero() && (time.Since(at) >= fairRefresh || prev.m.gen != gen.gen)) {
			if at, err = f.enqueue(ctx, r, conn); err != nil {
				return err
			}
		}
		code, err = d.grant(ctx, r, conn, true, true)
		if err == nil && code >= codeQueue && r.Waiting && at.IsZero() {
			if at, err = f.enqueue(ctx, r, conn); err != nil {
				return err
			}
			code, err = d.grant(ctx, r, conn, true, true)
		}
		if err == nil && code < codeAbandoned && !at.IsZero() {
			// Granted: out of the queue, with the entries that died.
			_, err = d.db.ExecContext(ctx, `DELETE FROM `+d.fair+` WHERE lock_key = `+lit(r.Key)+`
	AND (owner = `+lit(r.Owner)+` OR expires_at <= `+now+`)`)
		}
		return err
	})
	switch {
	case err != nil:
		return driver.Grant{}, err
	case code == codeQueue || code >= codeBusy:
		if r.Waiting {
			d.busy.note(r.Key)
		}
		remaining := time.Duration(-1)
		if code >= codeBusy {
			remaining = time.Duration(code-codeBusy) * time.Microsecond
		}
		queued := !at.IsZero()
		t := busyTaken(remaining, gen, queued)
		t.Handle = fairWait{m: gen, at: at}
		if queued && conn == 0 && (remaining < 0 || remaining > WakeBackstop) {
			t.Remaining = WakeBackstop // a polling waiter keeps its entry alive
		}
		return driver.Grant{}, t
	}
	return d.granted(f, r, code, gen)
}

// enqueue writes r's queue entry, with the Driver's sleeping connection conn
// for its wake-ups: a new one at the end of the queue, a live one kept in its
// place for another FairWaiterTTL, one that had died replaced by a new one.
// It returns the time the entry was written (before the round trip), zero
// when it wrote none: r's acquisition was abandoned (the key's row marks it;
// the check and the write are one statement, which an Abandon cannot
// overtake).
func (f *FairDriver) enqueue(ctx context.Context, r driver.AcquireRequest, conn int64) (time.Time, error) {
	d := f.d
	k, o := lit(r.Key), lit(r.Owner)
	life := now + ` + INTERVAL ` + num(micros(FairWaiterTTL)) + ` MICROSECOND`
	for range 2 {
		sent := time.Now()
		// The reply's last-insert id is the entry's position: new, or the
		// live one's; 0 when none was written.
		res, err := d.db.ExecContext(ctx, `INSERT INTO `+d.fair+` (lock_key, owner, conn, expires_at)
SELECT `+k+`, `+o+`, `+num(conn)+`, `+life+` FROM DUAL
WHERE NOT EXISTS (SELECT 1 FROM `+d.table+` WHERE lock_key = `+k+` AND `+gone(o)+`)
ON DUPLICATE KEY UPDATE
	conn = IF(expires_at > `+now+`, `+num(conn)+` + 0 * LAST_INSERT_ID(seq), conn + 0 * LAST_INSERT_ID(0)),
	expires_at = IF(expires_at > `+now+`, `+life+`, expires_at)`)
		if err != nil {
			return time.Time{}, err
		}
		if id, err := res.LastInsertId(); err != nil || id != 0 {
			return sent, err
		}
		// Abandoned, or an entry that died: that one leaves, and a new
		// one takes the end of the queue.
		if res, err = d.db.ExecContext(ctx, `DELETE FROM `+d.fair+` WHERE lock_key = `+k+` AND owner = `+o+` AND expires_at <= `+now); err != nil {
			return time.Time{}, err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return time.Time{}, err
		}
	}
	return time.Time{}, nil
}

// Extend implements driver.Driver, as Driver.Extend.
func (f *FairDriver) Extend(ctx context.Context, h driver.Holding, ttl time.Duration) (time.Duration, error) {
	if f == nil {
		return 0, errNilDriver
	}
	return f.d.Extend(ctx, h, ttl)
}

// ExtendMany implements driver.BatchExtender, as Driver.ExtendMany.
func (f *FairDriver) ExtendMany(ctx context.Context, reqs []driver.ExtendRequest) []driver.ExtendResult {
	var d *Driver
	if f != nil {
		d = f.d
	}
	return d.ExtendMany(ctx, reqs)
}

// TTL implements driver.Driver, as Driver.TTL.
func (f *FairDriver) TTL(ctx context.Context, h driver.Holding) (time.Duration, error) {
	if f == nil {
		return 0, errNilDriver
	}
	return f.d.TTL(ctx, h)
}

// Resume implements driver.Resumer, as Driver.Resume: a fair lock's holder is
// a plain holder of its row.
func (f *FairDriver) Resume(ctx context.Context, h driver.Holding, token uint64) (driver.Grant, error) {
	if f == nil {
		return driver.Grant{}, errNilDriver
	}
	return f.d.resume(ctx, f, h, token)
}

// Fence is Driver.Fence for a lease of a fair lock: a fair lock's holder is a
// plain holder of its row.
func (f *FairDriver) Fence(ctx context.Context, tx *sql.Tx, lease *dlock.Lease) error {
	if f == nil {
		return errNilDriver
	}
	return f.d.Fence(ctx, tx, lease)
}

// Subscribe implements driver.Notifier, as Driver.Subscribe: a waiter is woken
// when it heads the queue of a key that was freed (or when its Driver is
// woken for another reason).
func (f *FairDriver) Subscribe(ctx context.Context, h driver.Holding) (<-chan struct{}, func(), error) {
	if f == nil {
		return nil, nil, errNilDriver
	}
	if w, ok := h.Handle.(fairWait); ok {
		h.Handle = w.m
	}
	return f.d.Subscribe(ctx, h)
}

// Release implements driver.Driver: one statement frees the owner's row (as
// Driver.Release does) and reads the sleeping connection of the head of the
// key's queue, whose Driver is then woken.
func (f *FairDriver) Release(ctx context.Context, h driver.Holding) error {
	if f == nil {
		return errNilDriver
	}
	d := f.d
	var n, code int64
	err := d.do(ctx, "release", func(ctx context.Context) error {
		// The reply's last-insert id: twice the head's connection, plus
		// one when the holding was live.
		var err error
		n, code, err = d.execCode(ctx, `UPDATE `+d.table+` SET
	holder_conn = 0 * LAST_INSERT_ID(2 * COALESCE(`+d.queueHead("conn", h.Key)+`, 0) + (expires_at >= `+now+`)),
	expires_at = LEAST(expires_at, `+now+`), metadata = X'', owner = X''`+releaseWhere(h))
		return err
	})
	if err != nil {
		return err
	}
	if n == 0 {
		return notHeld(h.Key)
	}
	f.wakeHead(ctx, h.Key, code/2)
	if code%2 == 0 {
		return notHeld(h.Key)
	}
	return nil
}

// wakeHead wakes the Driver's own waiters of key and the Driver of the
// sleeping connection conn (the head of key's queue; 0 for none), unless
// that is this Driver's.
func (f *FairDriver) wakeHead(ctx context.Context, key string, conn int64) {
	f.d.w.wakeKey(key)
	if conn != 0 && conn != f.d.w.sleeperID() {
		f.d.killAll(ctx, conn, "")
	}
}

// Abandon implements driver.Abandoner: as Driver.Abandon (the holding freed,
// the acquisition marked in the key's row, so that an attempt in flight can
// neither take the key nor queue again), then the owner leaves the queue, and
// the head of the queue of a free key is woken.
func (f *FairDriver) Abandon(ctx context.Context, h driver.Holding) error {
	if f == nil {
		return errNilDriver
	}
	d := f.d
	if err := d.Abandon(ctx, h); err != nil {
		return err
	}
	var next int64
	err := d.do(ctx, "abandon", func(ctx context.Context) error {
		if _, err := d.db.ExecContext(ctx, `DELETE FROM `+d.fair+` WHERE lock_key = `+lit(h.Key)+`
	AND (owner = `+lit(h.Owner)+` OR expires_at <= `+now+`)`); err != nil {
			return err
		}
		err := d.db.QueryRowContext(ctx, `SELECT COALESCE(`+d.queueHead("conn", h.Key)+`, 0) FROM `+d.table+`
WHERE lock_key = `+lit(h.Key)+` AND (owner = X'' OR expires_at <= `+now+`)`).Scan(&next)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		return err
	})
	if err == nil {
		f.wakeHead(ctx, h.Key, next)
	}
	return err
}

// Inspect implements driver.Inspector, as Driver.Inspect, with the live
// entries of the key's queue as Waiters.
func (f *FairDriver) Inspect(ctx context.Context, key string) (driver.LockInfo, error) {
	if f == nil {
		return driver.LockInfo{Key: key}, errNilDriver
	}
	return f.d.inspect(ctx, key, driver.KindFair)
}

// ListPrefix implements driver.Inspector, as Driver.ListPrefix.
func (f *FairDriver) ListPrefix(ctx context.Context, prefix string) ([]driver.LockInfo, error) {
	if f == nil {
		return nil, errNilDriver
	}
	return f.d.list(ctx, prefix, driver.KindFair)
}

// ForceUnlock implements driver.Inspector, as Driver.ForceUnlock: the holder's
// Driver is told at once, and the head of the queue is woken to take the lock
// next.
func (f *FairDriver) ForceUnlock(ctx context.Context, key string) (driver.LockInfo, error) {
	if f == nil {
		return driver.LockInfo{Key: key}, errNilDriver
	}
	return f.d.forceUnlock(ctx, key, driver.KindFair)
}
