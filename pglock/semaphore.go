package pglock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// MaxPermits is the largest number of permits a semaphore may have.
const MaxPermits = 1 << 16

// StoredSize, in place of a number of permits, makes the driver of semaphores
// that take each key's stored size (see SemaphoreDriver.Resize) whatever it
// is, and otherwise the size of the key's holders; with neither, an
// acquisition fails with an error matching dlock.ErrConflict.
const StoredSize = -1

// SemaphoreDriver is the driver.Driver of counting semaphores of n permits in
// the database: at most n leases of a key are held at once, each with
// its own owner, fencing token, TTL and loss signal. It is also a
// driver.Notifier, a driver.Abandoner and a driver.Inspector. Most users want
// NewSemaphore.
//
// A semaphore's permits are rows of their own table (the locks' table with
// "_sem" appended, created by Migrate): one row per permit in use and a header
// row per key. An acquisition is one transaction that locks the header row
// first, so that the acquisitions of a key are serialized: it checks the
// number of permits the key is used with (a Client made with another n gets
// an error matching dlock.ErrConflict while any permit is held), finds the
// owner's permit (a retry gets it back) or a free one, and draws the token
// while it holds the header. Tokens therefore increase with every grant of
// the key. Releases and renewals touch the permit's row alone. Semaphore keys
// are a namespace of their own: a semaphore and an exclusive lock of the same
// name are two locks. Waiters are woken by the release of any permit of the
// key; they are not queued in arrival order.
//
// Resize (Client.Resize) changes the number of permits of a key for every
// Client: the size it stores in the key's header row (kept until the row is
// deleted) is the truth from then on, and n is the initial size only. Clients
// made with the key's size before its first resize, or with the size in
// force, go on working under the size in force; others get an error matching
// dlock.ErrConflict, unless made with StoredSize, which adopts whatever is
// stored.
type SemaphoreDriver struct {
	in inspection // its Inspect, ListPrefix and ForceUnlock
	d  *Driver
	n  int
	q  semQueries
}

var (
	_ driver.Driver     = (*SemaphoreDriver)(nil)
	_ driver.Notifier   = (*SemaphoreDriver)(nil)
	_ driver.Abandoner  = (*SemaphoreDriver)(nil)
	_ driver.Inspector  = (*SemaphoreDriver)(nil)
	_ driver.TTLLimiter = (*SemaphoreDriver)(nil)
	_ driver.Resizer    = (*SemaphoreDriver)(nil)
)

// NewSemaphore returns a Client whose locks are counting semaphores of n
// permits in the DefaultTable's semaphore table of pool's database (see
// SemaphoreDriver), with opts as the defaults of every call. It does no I/O.
// It returns an error matching dlock.ErrInvalid for n outside [1,
// MaxPermits] (but StoredSize), a nil pool or a bad option.
func NewSemaphore(pool *pgxpool.Pool, n int, opts ...dlock.Option) (*Client, error) {
	s, err := NewSemaphoreDriver(pool, n)
	if err != nil {
		return nil, err
	}
	return dlock.NewClient(s, opts...)
}

// NewSemaphoreDriver returns the driver of semaphores of n permits (or
// StoredSize) over pool, in the semaphore table of the table that opts name
// (see NewDriver). It does no I/O. It returns an error matching
// dlock.ErrInvalid for n outside [1, MaxPermits] (but StoredSize), a nil pool
// or a bad option.
func NewSemaphoreDriver(pool *pgxpool.Pool, n int, opts ...Option) (*SemaphoreDriver, error) {
	if n != StoredSize {
		if err := checkPermits(n); err != nil {
			return nil, err
		}
	}
	d, err := NewDriver(pool, opts...)
	if err != nil {
		return nil, err
	}
	in := inspection{d: d, kind: driver.KindSemaphore, inspect: d.semQ.inspect, list: d.semQ.list, forceUnlock: d.semQ.forceUnlock}
	return &SemaphoreDriver{in: in, d: d, n: max(n, 0), q: d.semQ}, nil
}

// checkPermits returns an error matching dlock.ErrInvalid unless n is in [1,
// MaxPermits].
func checkPermits(n int) error {
	if n < 1 || n > MaxPermits {
		return fmt.Errorf("%w: pglock: %d permits outside [1, %d]", driver.ErrInvalid, n, MaxPermits)
	}
	return nil
}

// Resize implements driver.Resizer in one transaction: under the key's
// header row it stores n as the key's size (and the size before the first
// resize), and notifies the key's waiters, which try again. Holders above a
// lowered size keep their permits until they release them or their leases
// end; no permit is granted meanwhile. n outside [1, MaxPermits] is
// dlock.ErrInvalid.
func (s *SemaphoreDriver) Resize(ctx context.Context, key string, n int) error {
	if s == nil {
		return errNilDriver
	}
	if err := driver.ValidateKey(key); err != nil {
		return err
	}
	if err := checkPermits(n); err != nil {
		return err
	}
	return s.d.doOn(ctx, "resize", partSem, func(ctx context.Context) error {
		b := &pgx.Batch{}
		b.Queue(s.q.header, key, n, acquireLockWait.Milliseconds())
		b.Queue(s.q.resize, key, n, s.n, s.d.channel)
		return s.d.pool.SendBatch(ctx, b).Close()
	})
}

// TTLLimits implements driver.TTLLimiter.
func (s *SemaphoreDriver) TTLLimits() driver.TTLLimits { return driver.DefaultTTLLimits }

// Subscribe implements driver.Notifier, as Driver.Subscribe: a waiter is woken
// when a permit of its key is released.
func (s *SemaphoreDriver) Subscribe(ctx context.Context, h driver.Holding) (<-chan struct{}, func(), error) {
	return s.d.Subscribe(ctx, h)
}

// semQueries are the statements of the semaphores of a Driver.
type semQueries struct {
	header, grant, release, extend, ttl, abandon, inspect, list, forceUnlock string
	sweep, resize                                                            string
}

// buildSemQueries writes the statements of the semaphore table (quoted) with
// tokens from seq, its CREATE TABLE, and a query that checks its columns.
func buildSemQueries(table, seq string) (q semQueries, create, check string) {
	r := strings.NewReplacer("$T", table, "$S", seq, "$REM", remainingUS)
	s := func(q string) string { return r.Replace(q) }
	q = semQueries{
		// $1 key, $2 n, $3 the longest wait for the row's lock in ms: the
		// key's header row, made if missing, locked.
		header: s(`
INSERT INTO $T AS l (key, slot, n, owner, token, expires_at)
VALUES ($1, -1, $2::int + 0 * length(set_config('lock_timeout', $3::bigint::text, true)), '', 0, '-infinity')
ON CONFLICT (key, slot) DO UPDATE SET n = l.n`),
		// $1 key, $2 owner, $3 the Client's n (0: it adopts the stored
		// size), $4 ttl in µs, $5 metadata; the header is locked. A resized
		// key's header holds its size (n) and its size before the first
		// resize (token; -1 until a Client with a size comes, when it was
		// not known at the resize); without, the size is the holders' n,
		// or $3. One
		// row: the outcome (granted, busy, abandoned, another n), the
		// token, the soonest end of a permit in use in µs, and the size in
		// force when $3 disagrees with it (0: none to adopt).
		grant: s(`
WITH live AS (
	SELECT slot, owner, n, $REM AS rem FROM $T l
	WHERE key = $1 AND slot >= 0 AND owner <> '' AND expires_at > clock_timestamp()
), hdr AS (
	SELECT n, token AS initial FROM $T WHERE key = $1 AND slot = -1 AND token <> 0
), learn AS (
	UPDATE $T SET token = $3 WHERE key = $1 AND slot = -1 AND token = -1 AND $3 <> 0
), st AS (
	SELECT
		EXISTS (SELECT FROM $T h WHERE h.key = $1 AND h.slot = -1
			AND h.abandoned_until > clock_timestamp() AND $2 = ANY (h.abandoned)) AS gone,
		CASE WHEN EXISTS (SELECT FROM hdr)
			THEN (SELECT n FROM hdr WHERE $3 <> 0 AND $3 <> n AND $3 <> initial AND initial > 0)
			ELSE (SELECT max(n) FROM live WHERE $3 <> 0 AND n <> $3) END AS other,
		coalesce((SELECT n FROM hdr), nullif($3::int, 0), (SELECT max(n) FROM live)) AS size,
		(SELECT min(slot) FROM live WHERE owner = $2) AS own,
		(SELECT count(*) FROM live) AS used,
		(SELECT min(rem) FROM live) AS soonest
), sz AS (
	SELECT *, (SELECT min(s) FROM generate_series(0, size - 1) s WHERE s NOT IN (SELECT slot FROM live)) AS free
	FROM st
), g AS (
	INSERT INTO $T AS l (key, slot, n, owner, token, expires_at, metadata)
	SELECT $1, coalesce(own, free), size, $2, nextval('$S'), clock_timestamp() + $4::bigint * interval '1 microsecond', $5
	FROM sz WHERE NOT gone AND other IS NULL AND size IS NOT NULL
		AND (own IS NOT NULL OR used < size AND free IS NOT NULL)
	ON CONFLICT (key, slot) DO UPDATE SET n = EXCLUDED.n, owner = EXCLUDED.owner,
		token = CASE WHEN l.owner = EXCLUDED.owner THEN l.token ELSE EXCLUDED.token END,
		expires_at = EXCLUDED.expires_at, metadata = EXCLUDED.metadata
	RETURNING token
)
SELECT CASE WHEN gone THEN 2 WHEN other IS NOT NULL OR size IS NULL THEN 3 WHEN EXISTS (SELECT FROM g) THEN 0 ELSE 1 END,
	coalesce((SELECT token FROM g), 0), coalesce(soonest, -1), coalesce(other, 0)
FROM sz`),
		// $1 key, $2 the new size, $3 the resizing Client's n (0: it
		// adopts), $4 channel; the header is locked. It stores the size in
		// the header's n and every permit row's, and the size before the
		// first resize in the header's token (-1 when unknown: no holder,
		// and a resizer that adopts), and notifies the waiters.
		// One row: the size before (0: none).
		resize: s(`
WITH h AS (
	SELECT n FROM $T WHERE key = $1 AND slot = -1 AND token <> 0
), live AS (
	SELECT max(n) AS n FROM $T WHERE key = $1 AND slot >= 0 AND owner <> '' AND expires_at > clock_timestamp()
), upd AS (
	UPDATE $T l SET n = $2::int,
		token = CASE WHEN l.slot = -1 AND l.token = 0
			THEN coalesce((SELECT n FROM live), nullif($3::int, 0), -1) ELSE l.token END
	WHERE key = $1
)
SELECT coalesce((SELECT n FROM h), (SELECT n FROM live), 0), pg_notify($4, $1) IS NULL`),
		// $1 key, $2 owner, $3 channel.
		release: s(`
WITH cur AS (
	SELECT key, slot, expires_at > clock_timestamp() AS live
	FROM $T WHERE key = $1 AND slot >= 0 AND owner = $2 FOR UPDATE
), upd AS (
	UPDATE $T l SET owner = '', expires_at = clock_timestamp(), metadata = ''
	FROM cur WHERE l.key = cur.key AND l.slot = cur.slot
)
SELECT bool_or(live), pg_notify($3, $1) IS NULL FROM cur HAVING count(*) > 0`),
		// $1 key, $2 owner, $3 ttl in µs.
		extend: s(`
UPDATE $T SET expires_at = clock_timestamp() + $3::bigint * interval '1 microsecond'
WHERE key = $1 AND slot >= 0 AND owner = $2 AND expires_at > clock_timestamp()`),
		// $1 key, $2 owner.
		ttl: s(`SELECT $REM FROM $T l WHERE key = $1 AND slot >= 0 AND owner = $2 AND expires_at > clock_timestamp()`),
		// $1 key, $2 owner, $3 mark life in µs; the header is locked.
		abandon: s(fmt.Sprintf(`
UPDATE $T l SET
	abandoned = CASE WHEN l.abandoned_until > clock_timestamp()
		THEN (l.abandoned || $2::text)[greatest(1, cardinality(l.abandoned) + 2 - %d):]
		ELSE ARRAY[$2::text] END,
	abandoned_until = greatest(l.abandoned_until, clock_timestamp() + $3::bigint * interval '1 microsecond')
WHERE key = $1 AND slot = -1`, maxMarks)),
		// $1 key: every permit row.
		inspect: s(`
SELECT owner, token, metadata, $REM, n, owner <> '' AND expires_at > clock_timestamp(), 0::bigint
FROM $T l WHERE key = $1 AND slot >= 0`),
		// $1 the pattern's literal prefix.
		list: s(`
SELECT key, owner, token, metadata, $REM, n, true, 0::bigint FROM $T l
WHERE slot >= 0 AND owner <> '' AND expires_at > clock_timestamp() AND starts_with(key, $1)`),
		// $1 the age in µs past its expiry of a row to delete: permits, and
		// the headers of keys without a permit in use, but those of resized
		// keys (which keep the stored size).
		sweep: s(`
DELETE FROM $T WHERE ctid IN (
	SELECT ctid FROM $T l
	WHERE greatest(expires_at, abandoned_until) < clock_timestamp() - $1::bigint * interval '1 microsecond'
		AND (slot >= 0 OR token = 0 AND NOT EXISTS (
			SELECT FROM $T p WHERE p.key = l.key AND p.slot >= 0 AND p.expires_at > clock_timestamp()))
	FOR UPDATE SKIP LOCKED
)`),
		// $1 key, $2 channel: frees every permit in use, and returns them
		// (one notification however many: a transaction sends the same one
		// once).
		forceUnlock: s(`
WITH cur AS (
	SELECT key, slot, owner, token, metadata, $REM AS rem, n FROM $T l
	WHERE key = $1 AND slot >= 0 AND owner <> '' AND expires_at > clock_timestamp() FOR UPDATE
), upd AS (
	UPDATE $T l SET owner = '', expires_at = clock_timestamp(), metadata = ''
	FROM cur WHERE l.key = cur.key AND l.slot = cur.slot
)
SELECT owner, token, metadata, rem, n, pg_notify($2, $1) IS NULL FROM cur`),
	}
	create = s(`CREATE TABLE IF NOT EXISTS $T (
	key             text        NOT NULL,
	slot            int         NOT NULL,
	n               int         NOT NULL,
	owner           text        NOT NULL,
	token           bigint      NOT NULL,
	expires_at      timestamptz NOT NULL,
	metadata        text        NOT NULL DEFAULT '',
	abandoned       text[]      NOT NULL DEFAULT '{}',
	abandoned_until timestamptz NOT NULL DEFAULT '-infinity',
	PRIMARY KEY (key, slot)
)`)
	check = s(`SELECT key, slot, n, owner, token, expires_at, metadata, abandoned, abandoned_until FROM $T LIMIT 0`)
	return q, create, check
}

// limitError is the error of a semaphore used with another number of permits.
type limitError struct {
	key       string
	n, stored int
}

func (e *limitError) Error() string {
	if e.stored == 0 {
		return fmt.Sprintf("pglock: semaphore %q has no stored size to adopt", e.key)
	}
	return fmt.Sprintf("pglock: semaphore %q has %d permits, not %d", e.key, e.stored, e.n)
}

// Is makes a limitError match dlock.ErrConflict.
func (e *limitError) Is(target error) bool { return target == driver.ErrConflict }

// Acquire implements driver.Driver in one round trip and one transaction of
// two statements: lock the key's header row (made if missing; waiting at most
// as long as an acquisition of an exclusive lock), then, with a snapshot
// taken under that lock, take the owner's permit again or the lowest free
// one.
func (s *SemaphoreDriver) Acquire(ctx context.Context, r driver.AcquireRequest) (driver.Grant, error) {
	if s == nil {
		return driver.Grant{}, errNilDriver
	}
	if err := checkMetadata(r.Metadata); err != nil {
		return driver.Grant{}, err
	}
	var state int
	var token, soonest, stored int64
	sent := time.Now()
	err := s.d.doOn(ctx, "acquire", partSem, func(ctx context.Context) error {
		b := &pgx.Batch{}
		b.Queue(s.q.header, r.Key, s.n, acquireLockWait.Milliseconds())
		b.Queue(s.q.grant, r.Key, r.Owner, s.n, micros(r.TTL), r.Metadata).QueryRow(func(row pgx.Row) error {
			return row.Scan(&state, &token, &soonest, &stored)
		})
		return s.d.pool.SendBatch(ctx, b).Close()
	})
	switch {
	case sqlState(err) == "55P03": // another transaction holds the header a while
		return driver.Grant{}, &driver.Taken{Remaining: -1}
	case err != nil:
		return driver.Grant{}, err
	}
	switch state {
	case stateGranted:
		return driver.Grant{Token: uint64(token), TTL: r.TTL, Lost: s.d.ln.hold(s, r.Key, r.Owner, sent)}, nil
	case stateAbandoned:
		return driver.Grant{}, fmt.Errorf("%w: pglock: the acquisition of %q was abandoned", driver.ErrNotObtained, r.Key)
	case stateMismatch:
		return driver.Grant{}, &limitError{key: r.Key, n: s.n, stored: int(stored)}
	}
	return driver.Grant{}, &driver.Taken{Remaining: time.Duration(soonest) * time.Microsecond}
}

// Info implements driver.Driver: the counting semaphore of PostgreSQL.
func (s *SemaphoreDriver) Info() driver.DriverInfo {
	return driver.DriverInfo{Backend: "pglock", Kind: driver.KindSemaphore}
}

// stateMismatch is the outcome of a semaphore acquisition with another
// number of permits than the key's holders.
const stateMismatch = 3

// Extend implements driver.Driver.
func (s *SemaphoreDriver) Extend(ctx context.Context, h driver.Holding, ttl time.Duration) (time.Duration, error) {
	if s == nil {
		return 0, errNilDriver
	}
	return s.d.extend(ctx, s.q.extend, h, ttl)
}

// Release implements driver.Driver: it frees the owner's permit and notifies
// the key's waiters.
func (s *SemaphoreDriver) Release(ctx context.Context, h driver.Holding) error {
	if s == nil {
		return errNilDriver
	}
	return s.d.release(ctx, s.q.release, h, h.Key, h.Owner, s.d.channel)
}

// TTL implements driver.Driver.
func (s *SemaphoreDriver) TTL(ctx context.Context, h driver.Holding) (time.Duration, error) {
	if s == nil {
		return 0, errNilDriver
	}
	return s.d.ttl(ctx, s.q.ttl, h)
}

// Abandon implements driver.Abandoner: under the key's header row, it marks
// the owner's acquisition abandoned (an attempt still in flight waits for the
// header and then meets the mark) and frees the owner's permit.
func (s *SemaphoreDriver) Abandon(ctx context.Context, h driver.Holding) error {
	if s == nil {
		return errNilDriver
	}
	return s.d.doOn(ctx, "abandon", partSem, func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, s.d.pool, func(tx pgx.Tx) error { return s.abandon(ctx, tx, h) })
	})
}

// abandon marks h's acquisition abandoned in tx, under the key's header, and
// frees h's permit.
func (s *SemaphoreDriver) abandon(ctx context.Context, tx pgx.Tx, h driver.Holding) error {
	if _, err := tx.Exec(ctx, s.q.header, h.Key, s.n, acquireLockWait.Milliseconds()); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, s.q.abandon, h.Key, h.Owner, micros(max(h.TTL, AbandonMarkTTL))); err != nil {
		return err
	}
	var live, notified bool
	err := tx.QueryRow(ctx, s.q.release, h.Key, h.Owner, s.d.channel).Scan(&live, &notified)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	return err
}
