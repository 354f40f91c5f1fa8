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

// FairWaiterTTL is how long the queue entry of a fair-lock waiter lives
// without an attempt of its Lock; a waiting Lock makes one at least every
// FairWaiterTTL/5. A waiter that dies leaves the queue after it, and is then
// no longer in the way of those behind it.
const FairWaiterTTL = 5 * time.Second

// FairDriver is the driver.Driver of fair locks: the exclusive locks of a
// table of locks, granted in arrival order. A waiting Lock enqueues its owner
// (a row of the locks' table with "_queue" appended, created by Migrate) on
// its first attempt and keeps its place across attempts; the lock goes to the
// oldest live entry of the queue, and TryLock does not take it while anybody
// queues. It is also a driver.Notifier, a driver.Abandoner (an abandoned Lock
// leaves the queue at once) and a driver.Inspector (with the queued waiters).
// Most users want NewFair.
//
// Fair and plain locks share the table: a fair lock's holder is a plain
// holder of the key, and a plain Client's Lock on a key that fair waiters
// queue for does not see the queue. Use one kind of Client per key.
type FairDriver struct {
	in inspection // its Inspect, ListPrefix and ForceUnlock
	d  *Driver
}

var (
	_ driver.Driver     = (*FairDriver)(nil)
	_ driver.Notifier   = (*FairDriver)(nil)
	_ driver.Abandoner  = (*FairDriver)(nil)
	_ driver.Inspector  = (*FairDriver)(nil)
	_ driver.TTLLimiter = (*FairDriver)(nil)
)

// NewFair returns a Client whose locks are granted in arrival order (see
// FairDriver), in the DefaultTable of pool's database, with opts as the
// defaults of every call. It does no I/O.
func NewFair(pool *pgxpool.Pool, opts ...dlock.Option) (*Client, error) {
	f, err := NewFairDriver(pool)
	if err != nil {
		return nil, err
	}
	return dlock.NewClient(f, opts...)
}

// NewFairDriver returns the driver of fair locks over pool, in the table that
// opts name (see NewDriver). It does no I/O.
func NewFairDriver(pool *pgxpool.Pool, opts ...Option) (*FairDriver, error) {
	d, err := NewDriver(pool, opts...)
	if err != nil {
		return nil, err
	}
	in := d.in
	in.kind, in.waiters = driver.KindFair, d.fairQ.waiters
	return &FairDriver{in: in, d: d}, nil
}

// fairQueries are the statements of the fair locks of a Driver.
type fairQueries struct {
	lockRow, acquire, abandon, waiters, sweep string
}

// buildFairQueries writes the statements of the fair locks of table with the
// queue table queue and tokens from seq (all quoted), the queue's CREATE
// TABLE, and a query that checks its columns.
func buildFairQueries(table, queue, seq string) (q fairQueries, create, check string) {
	r := strings.NewReplacer("$T", table, "$Q", queue, "$S", seq, "$REM", remainingUS)
	s := func(q string) string { return r.Replace(q) }
	q = fairQueries{
		// $1 key, $2 the longest wait for the row's lock in ms: the key's
		// row, made free if missing, locked until the transaction ends.
		lockRow: s(`
INSERT INTO $T AS l (key, owner, token, expires_at)
VALUES ($1, '', -nextval('$S'), clock_timestamp() + 0 * length(set_config('lock_timeout', $2::bigint::text, true)) * interval '1 second')
ON CONFLICT (key) DO UPDATE SET owner = l.owner`),
		// $1 key, $2 owner, $3 ttl in µs, $4 metadata, $5 whether to queue,
		// $6 the waiter's life in µs; the key's row is locked. One row: the
		// outcome (granted, busy, abandoned), the token, the holder's time
		// left in µs (-1 when the queue is in the way), whether the owner
		// queues.
		acquire: s(`
WITH lk AS (
	SELECT owner, expires_at, $REM AS rem,
		owner = $2 AND expires_at > clock_timestamp() AS mine,
		owner <> '' AND owner <> $2 AND expires_at > clock_timestamp() AS held,
		$2 = ANY (abandoned) AND abandoned_until > clock_timestamp() AS gone
	FROM $T l WHERE key = $1
), head AS (
	SELECT owner FROM $Q WHERE key = $1 AND expires_at > clock_timestamp() ORDER BY seq LIMIT 1
), g AS (
	UPDATE $T l SET owner = $2,
		token = CASE WHEN lk.mine THEN l.token ELSE nextval('$S') END,
		expires_at = clock_timestamp() + $3::bigint * interval '1 microsecond', metadata = $4
	FROM lk WHERE l.key = $1 AND NOT lk.gone
		AND (lk.mine OR (NOT lk.held AND coalesce((SELECT owner FROM head), $2) = $2))
	RETURNING l.token
), deq AS (
	DELETE FROM $Q WHERE key = $1
		AND (owner = $2 AND EXISTS (SELECT FROM g) OR owner <> $2 AND expires_at <= clock_timestamp())
), enq AS (
	INSERT INTO $Q AS w (key, owner, seq, expires_at)
	SELECT $1, $2, nextval('$S'), clock_timestamp() + $6::bigint * interval '1 microsecond'
	FROM lk WHERE $5 AND NOT lk.gone AND NOT EXISTS (SELECT FROM g)
	ON CONFLICT (key, owner) DO UPDATE SET expires_at = EXCLUDED.expires_at,
		seq = CASE WHEN w.expires_at > clock_timestamp() THEN w.seq ELSE EXCLUDED.seq END
	RETURNING 1
)
SELECT CASE WHEN lk.gone THEN 2 WHEN EXISTS (SELECT FROM g) THEN 0 ELSE 1 END,
	coalesce((SELECT token FROM g), 0),
	CASE WHEN lk.held THEN lk.rem ELSE -1 END,
	EXISTS (SELECT FROM enq)
FROM lk`),
		// $1 key, $2 owner: leave the queue (the key's row is locked).
		abandon: s(`DELETE FROM $Q WHERE key = $1 AND owner = $2`),
		// $1 the age in µs past its end of a queue entry to delete.
		sweep: s(`DELETE FROM $Q WHERE expires_at < clock_timestamp() - $1::bigint * interval '1 microsecond'`),
		// $1 key: the live queue entries.
		waiters: s(`SELECT count(*) FROM $Q WHERE key = $1 AND expires_at > clock_timestamp()`),
	}
	create = s(`CREATE TABLE IF NOT EXISTS $Q (
	key        text        NOT NULL,
	owner      text        NOT NULL,
	seq        bigint      NOT NULL,
	expires_at timestamptz NOT NULL,
	PRIMARY KEY (key, owner)
)`)
	check = s(`SELECT key, owner, seq, expires_at FROM $Q LIMIT 0`)
	return q, create, check
}

// TTLLimits implements driver.TTLLimiter.
func (f *FairDriver) TTLLimits() driver.TTLLimits { return driver.DefaultTTLLimits }

// Acquire implements driver.Driver in one round trip and one transaction of
// two statements: lock the key's row, then grant it if it is free and the
// owner heads the queue (or nobody queues), and otherwise queue the owner
// when r.Waiting.
func (f *FairDriver) Acquire(ctx context.Context, r driver.AcquireRequest) (driver.Grant, error) {
	if f == nil {
		return driver.Grant{}, errNilDriver
	}
	if err := checkMetadata(r.Metadata); err != nil {
		return driver.Grant{}, err
	}
	var state int
	var token, rem int64
	var queued bool
	sent := time.Now()
	err := f.d.doOn(ctx, "acquire", partFair, func(ctx context.Context) error {
		b := &pgx.Batch{}
		b.Queue(f.d.fairQ.lockRow, r.Key, acquireLockWait.Milliseconds())
		b.Queue(f.d.fairQ.acquire, r.Key, r.Owner, micros(r.TTL), r.Metadata, r.Waiting, micros(FairWaiterTTL)).QueryRow(func(row pgx.Row) error {
			return row.Scan(&state, &token, &rem, &queued)
		})
		return f.d.pool.SendBatch(ctx, b).Close()
	})
	switch {
	case sqlState(err) == "55P03": // a transaction fenced on the key holds its row
		return driver.Grant{}, &driver.Taken{Remaining: -1, Queued: r.Waiting, RetryAfter: FairWaiterTTL / 5}
	case err != nil:
		return driver.Grant{}, err
	case state == stateGranted:
		return driver.Grant{Token: uint64(token), TTL: r.TTL, Lost: f.d.ln.hold(f, r.Key, r.Owner, sent)}, nil
	case state == stateAbandoned:
		return driver.Grant{}, fmt.Errorf("%w: pglock: the acquisition of %q was abandoned", driver.ErrNotObtained, r.Key)
	}
	busy := &driver.Taken{Remaining: -1, Queued: queued}
	if rem >= 0 {
		busy.Remaining = time.Duration(rem) * time.Microsecond
	}
	if queued {
		// Attempt again within the entry's life, and when the holder's
		// time has run out (an expiry sends no notification).
		busy.RetryAfter = FairWaiterTTL / 5
		if busy.Remaining >= 0 {
			busy.RetryAfter = min(busy.RetryAfter, busy.Remaining+time.Millisecond)
		}
	}
	return driver.Grant{}, busy
}

// Info implements driver.Driver: the fair mutex of PostgreSQL.
func (f *FairDriver) Info() driver.DriverInfo {
	return driver.DriverInfo{Backend: "pglock", Kind: driver.KindFair}
}

// Extend implements driver.Driver, as Driver.Extend.
func (f *FairDriver) Extend(ctx context.Context, h driver.Holding, ttl time.Duration) (time.Duration, error) {
	if f == nil {
		return 0, errNilDriver
	}
	return f.d.Extend(ctx, h, ttl)
}

// Release implements driver.Driver, as Driver.Release: the release notifies
// the key's waiters, and the head of the queue takes the lock.
func (f *FairDriver) Release(ctx context.Context, h driver.Holding) error {
	if f == nil {
		return errNilDriver
	}
	// Queued waiters do not mark the row: a fair release always notifies.
	return f.d.release(ctx, f.d.q.releaseAll, h, h.Key, h.Owner)
}

// TTL implements driver.Driver, as Driver.TTL.
func (f *FairDriver) TTL(ctx context.Context, h driver.Holding) (time.Duration, error) {
	if f == nil {
		return 0, errNilDriver
	}
	return f.d.TTL(ctx, h)
}

// Subscribe implements driver.Notifier, as Driver.Subscribe.
func (f *FairDriver) Subscribe(ctx context.Context, h driver.Holding) (<-chan struct{}, func(), error) {
	if f == nil {
		return nil, nil, errNilDriver
	}
	return f.d.Subscribe(ctx, h)
}

// Abandon implements driver.Abandoner: as Driver.Abandon (the holding freed,
// the acquisition marked), and the owner leaves the queue, in one
// transaction that holds the key's row, so that an attempt in flight cannot
// queue again.
func (f *FairDriver) Abandon(ctx context.Context, h driver.Holding) error {
	if f == nil {
		return errNilDriver
	}
	return f.d.doOn(ctx, "abandon", partFair, func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, f.d.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, f.d.q.abandonAll, h.Key, h.Owner, micros(max(h.TTL, AbandonMarkTTL)), f.d.channel); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, f.d.fairQ.abandon, h.Key, h.Owner)
			return err
		})
	})
}
