package pglock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/jackc/pgx/v5"
)

// queries are the statements of a Driver, for its table and sequence.
type queries struct {
	migrate, check                                            []string
	acquire, insert, extend, resume, release, releaseAll, ttl string
	abandon, abandonAll                                       string // abandonAll wakes every waiter (the fair lock's)
	sweep, inspect, list, forceUnlock, fence                  string
	putResult, getResult                                      string // dlock.Once's result, beside the lock
}

// remainingUS is the time a row has left, in whole microseconds, 0 when it
// has expired or is free (a free row's expiry is the time it was freed).
const remainingUS = `(extract(epoch FROM greatest(l.expires_at, clock_timestamp()) - clock_timestamp()) * 1e6)::bigint`

// grantable is whether the row l may go to owner $2 at the time c.now: it
// is free, the owner's already, or expired, it is not in its lock-delay, and
// the owner's acquisition was not abandoned.
const grantable = `((l.owner IN ('', $2) OR l.expires_at <= c.now) AND l.delay_until <= c.now AND NOT ` + delaying + ` AND NOT ` + gone + `
	AND (l.woken_until <= c.now OR coalesce(l.waiters[1] = $WID, false)))`

// gone is whether owner $2's acquisition of the row l was abandoned (see
// Abandon) at the time c.now.
const gone = `($2 = ANY (l.abandoned) AND l.abandoned_until > c.now)`

// waiterIDLen is the length in characters of the id under which an owner
// waits in a row's queue of waiters: the owner's last characters, which a
// Client draws at random (see waiterID). An entry of the queue is the
// waiting Driver's id (driverIDLen characters) followed by the owner's:
// the release NOTIFYs the Driver's own channel (wakePrefix and its id),
// which no other Driver's listening connection receives.
const waiterIDLen = 16

// driverIDLen is the length of a Driver's id, in hex digits.
const driverIDLen = 16

// wakePrefix starts the name of the channel on which a Driver is woken
// (see waiterIDLen).
const wakePrefix = "dlock_wake_"

// wakeWindow is how long a free row stays reserved for the waiter that a
// release (or an abandoned acquisition) woke, the first of its queue: the
// releasing process, or a newcomer, does not take the lock from under it
// meanwhile (each would then hold it again and again, and the lock would
// seldom change hands). A woken waiter that does not come in time (its
// process died) holds the others up this long, once: the next grant takes
// it out of the queue.
const wakeWindow = 100 * time.Millisecond

// maxWaiters is the most waiters a row's queue holds; a waiter that finds it
// full marks the row instead (waited), and the next release wakes every
// waiter of the key.
const maxWaiters = 64

// wakeSep separates the key from the waiter's id in the payload of a
// NOTIFY that wakes one waiter; keys have no control characters.
const wakeSep = "\x02"

// delaying is whether the holding of the row l ran out at most its
// lock-delay before c.now: the row is then in its lock-delay (as it is while
// delay_until, set by a forced unlock, lies ahead).
const delaying = `(l.owner <> '' AND l.expires_at <= c.now AND l.expires_at + l.lock_delay * interval '1 microsecond' > c.now)`

// delayEnd is the end of the row l's lock-delay ('-infinity' when it has
// none): for a holding, the end of the delay that follows its expiry.
const delayEnd = `greatest(l.delay_until, CASE WHEN l.owner <> '' AND l.lock_delay > 0 THEN l.expires_at + l.lock_delay * interval '1 microsecond' ELSE '-infinity' END)`

// delayLeftUS is the time left of the row l's lock-delay in whole
// microseconds, 0 when it is not in one.
const delayLeftUS = `CASE WHEN l.delay_until > c.now OR ` + delaying + ` THEN (extract(epoch FROM ` + delayEnd + ` - c.now) * 1e6)::bigint ELSE 0 END`

// buildQueries writes the statements for table and seq (both quoted), of the
// Driver whose id is id (see waiterIDLen).
//
// A row is held while its owner is not ” and its expiry lies ahead. A
// holding with a lock-delay (lock_delay, in µs) leaves the row in its delay
// for that long after its expiry, and a forced unlock of it until
// delay_until: nobody takes it meanwhile, and neither a release nor an
// extend by the old owner ends it. The token
// column is unique, which makes it a key column for PostgreSQL's row locks: an
// update that changes the token (a grant to another owner) or deletes the row
// conflicts with the FOR KEY SHARE lock of Fence, while Extend (which changes
// the expiry only) does not.
func buildQueries(table, seq, channel, id string) queries {
	// The entry of owner $2 in a queue of waiters.
	wid := "('" + id + "' || right($2, " + strconv.Itoa(waiterIDLen) + "))"
	r := strings.NewReplacer("$T", table, "$S", seq, "$REM", remainingUS, "$GRANT", strings.ReplaceAll(grantable, "$WID", wid), "$GONE", gone,
		"$WID", wid, "$MAXW", strconv.Itoa(maxWaiters),
		"$WINDOW", strconv.FormatInt(wakeWindow.Microseconds(), 10)+" microseconds",
		"$WAKE", wakePrefix, "$DIDLEN", strconv.Itoa(driverIDLen),
		"$DLEFT", delayLeftUS, "$DEND", delayEnd,
		// Constants are written into the text, so that a call sends fewer
		// arguments (the channel's name is letters, digits, '_' and '.').
		"$WAIT", strconv.FormatInt(acquireLockWait.Milliseconds(), 10), "$CHANNEL", "'"+channel+"'",
		// Half of every page is left free, so that an update of a row
		// finds room for the new version on its page.
		"$WITH", " WITH (fillfactor = 50)")
	s := func(q string) string { return r.Replace(q) }
	// free is the body of a statement that frees the rows selected (FOR NO
	// KEY UPDATE) by the CTE cur (a forced unlock). Rows stay, with their token: a row is
	// deleted only by Sweep, long after its expiry (see Sweep).
	free := `
	upd AS (
		UPDATE $T l SET owner = '', expires_at = clock_timestamp(), metadata = '',
			delay_until = clock_timestamp() + l.lock_delay * interval '1 microsecond'
		FROM cur WHERE l.key = cur.key
	)`
	q := queries{
		migrate: []string{
			s(`CREATE SEQUENCE IF NOT EXISTS $S AS bigint`),
			s(`CREATE TABLE IF NOT EXISTS $T (
				key             text        PRIMARY KEY,
				owner           text        NOT NULL,
				token           bigint      NOT NULL UNIQUE,
				expires_at      timestamptz NOT NULL,
				metadata        text        NOT NULL DEFAULT '',
				abandoned       text[]      NOT NULL DEFAULT '{}',
				abandoned_until timestamptz NOT NULL DEFAULT '-infinity',
				waited          boolean     NOT NULL DEFAULT false,
				lock_delay      bigint      NOT NULL DEFAULT 0,
				delay_until     timestamptz NOT NULL DEFAULT '-infinity',
				waiters         text[]      NOT NULL DEFAULT '{}',
				woken_until     timestamptz NOT NULL DEFAULT '-infinity',
				result          bytea,
				result_until    timestamptz NOT NULL DEFAULT '-infinity'
			)$WITH`),
			// A table of an earlier layout gets the columns it lacks (the
			// check before it fails on any other table).
			s(`SELECT key, owner, token, expires_at, metadata, abandoned, abandoned_until FROM $T LIMIT 0`),
			s(`ALTER TABLE $T ADD COLUMN IF NOT EXISTS waited boolean NOT NULL DEFAULT false,
				ADD COLUMN IF NOT EXISTS lock_delay bigint NOT NULL DEFAULT 0,
				ADD COLUMN IF NOT EXISTS delay_until timestamptz NOT NULL DEFAULT '-infinity',
				ADD COLUMN IF NOT EXISTS waiters text[] NOT NULL DEFAULT '{}',
				ADD COLUMN IF NOT EXISTS woken_until timestamptz NOT NULL DEFAULT '-infinity',
				ADD COLUMN IF NOT EXISTS result bytea,
				ADD COLUMN IF NOT EXISTS result_until timestamptz NOT NULL DEFAULT '-infinity'`),
		},
		check: []string{
			s(`SELECT key, owner, token, expires_at, metadata, abandoned, abandoned_until, waited, lock_delay, delay_until, waiters, woken_until, result, result_until FROM $T LIMIT 0`),
			s(`SELECT last_value FROM $S`),
		},
		// $1 key, $2 owner, $3 ttl in µs, $4 metadata, $5 whether the owner
		// will wait, $6 the lock-delay in µs. The
		// key's row is updated in place, whatever it holds, so that one
		// statement tells every outcome: taken over when it is grantable
		// (the token drawn anew unless the owner held it already; the owner
		// taken out of the queue of waiters, with the woken waiter the row
		// was reserved for, and the mark that wakes every waiter cleared
		// when the owner changes; a row reserved for a woken waiter is
		// grantable to that waiter alone), and otherwise left as it
		// is but with the owner at the end of the queue when it will wait
		// (once; not after its acquisition was abandoned; the row marked
		// instead when the queue is full). One
		// clock reading (c.now) decides the whole row. Only the token is
		// indexed besides the key, so every update but a grant to a new
		// owner is a HOT update. One row: granted (0) with the token, busy
		// (1) with the holder's time left in µs (or the reservation's), or
		// abandoned (2); no row
		// when the key has no row (see insert).
		acquire: s(`
UPDATE $T l SET
	owner = CASE WHEN $GRANT THEN $2 ELSE l.owner END,
	token = CASE WHEN $GRANT AND l.owner <> $2 THEN nextval('$S') ELSE l.token END,
	expires_at = CASE WHEN $GRANT THEN c.now + $3::bigint * interval '1 microsecond' ELSE l.expires_at END,
	-- set_config bounds the wait for the row's lock (lock_timeout, for this
	-- statement's transaction alone): the new row is computed before the
	-- row is locked.
	metadata = CASE WHEN $GRANT THEN $4::text ELSE l.metadata END || left(set_config('lock_timeout', '$WAIT', true), 0),
	waited = CASE WHEN $GRANT THEN l.waited AND l.owner = $2
		ELSE l.waited OR ($5 AND NOT $GONE AND cardinality(l.waiters) >= $MAXW AND NOT $WID = ANY (l.waiters)) END,
	-- (An uncontended acquisition meets an empty queue and no woken
	-- waiter: the cheap tests come first.)
	waiters = CASE WHEN cardinality(l.waiters) = 0 AND NOT $5 THEN l.waiters
		WHEN $GRANT THEN CASE WHEN cardinality(l.waiters) = 0 THEN l.waiters
			ELSE array_remove(CASE WHEN l.woken_until > '-infinity' THEN l.waiters[2:] ELSE l.waiters END, $WID) END
		WHEN NOT $5 OR $GONE OR $WID = ANY (l.waiters) OR cardinality(l.waiters) >= $MAXW THEN l.waiters
		ELSE l.waiters || $WID END,
	woken_until = CASE WHEN l.woken_until = '-infinity' THEN l.woken_until WHEN $GRANT THEN '-infinity' ELSE l.woken_until END,
	lock_delay = CASE WHEN $GRANT THEN $6::bigint ELSE l.lock_delay END
FROM (SELECT clock_timestamp() AS now) c
WHERE l.key = $1
RETURNING CASE WHEN l.owner = $2 AND l.expires_at > c.now THEN 0 WHEN $2 = ANY (l.abandoned) AND l.abandoned_until > c.now THEN 2 ELSE 1 END,
	l.token, (extract(epoch FROM greatest(l.expires_at, $DEND, l.woken_until, c.now) - c.now) * 1e6)::bigint`),
		// $1 key, $2 owner, $3 ttl in µs, $4 metadata, $5 lock-delay in µs:
		// the key's first row (or its first after Sweep), granted to the
		// owner; no row when another statement inserted it first.
		insert: s(`
INSERT INTO $T (key, owner, token, expires_at, metadata, lock_delay)
VALUES ($1, $2, nextval('$S'), clock_timestamp() + $3::bigint * interval '1 microsecond', $4::text, $5::bigint)
ON CONFLICT (key) DO NOTHING
RETURNING token`),
		// $1 key, $2 owner, $3 ttl in µs.
		extend: s(`
UPDATE $T SET expires_at = clock_timestamp() + $3::bigint * interval '1 microsecond'
WHERE key = $1 AND owner = $2 AND expires_at > clock_timestamp()`),
		// $1 key, $2 owner, $3 ttl in µs, $4 token: extend, of the holding
		// with that token alone (a detached lease's, taken up again).
		resume: s(`
UPDATE $T SET expires_at = clock_timestamp() + $3::bigint * interval '1 microsecond'
WHERE key = $1 AND owner = $2 AND token = $4 AND expires_at > clock_timestamp()`),
		// $1 key, $2 owner. The owner's row is freed in place (a HOT update),
		// keeping its token, and the first of its queue of waiters, if any,
		// is woken by a NOTIFY on its Driver's channel whose payload names
		// it (the key, wakeSep, its id), and the row is reserved for it for
		// wakeWindow (woken_until): one waiter per release, not all, and no
		// other acquisition takes the lock from under it meanwhile. It
		// leaves the queue when it takes the lock, or when another does
		// after the window. (The new row is computed before the row is
		// locked, as in acquire: a release that waited for another
		// statement's write of the row may wake one waiter more, never
		// none.) One row when the owner's row
		// was there: whether the holding had not expired when the server
		// received the release, and whether every waiter of the key was
		// woken (a NOTIFY with the key as payload): only when a waiter
		// found the queue full (or a Driver of an earlier version waited)
		// since the row's last grant (releaseAll: always).
		release: s(`
UPDATE $T l SET owner = '', expires_at = least(l.expires_at, clock_timestamp()), metadata = '',
	woken_until = CASE WHEN cardinality(l.waiters) = 0 THEN '-infinity'
		WHEN pg_notify('$WAKE' || left(l.waiters[1], $DIDLEN), $1 || chr(2) || substr(l.waiters[1], $DIDLEN + 1)) IS NOT NULL
		THEN clock_timestamp() + interval '$WINDOW' END
WHERE l.key = $1 AND l.owner = $2 AND (l.lock_delay = 0 OR l.expires_at > clock_timestamp())
RETURNING l.expires_at >= statement_timestamp(),
	CASE WHEN l.waited THEN pg_notify($CHANNEL, $1) IS NULL ELSE false END`),
		// $1 key, $2 owner.
		ttl: s(`SELECT $REM FROM $T l WHERE key = $1 AND owner = $2 AND expires_at > clock_timestamp()`),
		// $1 key, $2 owner, $3 mark life in µs, $4 channel. A row made for
		// the mark alone has a negative token: unique, and never granted.
		// The owner leaves the row's queue of waiters; when the row is free
		// after this (also when the owner held it) and not reserved for
		// another woken waiter, the first waiter left in the queue is woken
		// and the row reserved for it, as by a release: a waiter that a
		// release woke and that gives up passes the wake-up on. Every
		// waiter of the key is woken when the row is marked as waited for
		// (abandonAll: always).
		abandon: s(fmt.Sprintf(`
WITH up AS (
	INSERT INTO $T AS l (key, owner, token, expires_at, metadata, abandoned, abandoned_until)
	VALUES ($1, '', -nextval('$S'), clock_timestamp(), '', ARRAY[$2::text], clock_timestamp() + $3::bigint * interval '1 microsecond')
	ON CONFLICT (key) DO UPDATE SET
		owner = CASE WHEN l.owner = $2 THEN '' ELSE l.owner END,
		expires_at = CASE WHEN l.owner = $2 THEN least(l.expires_at, clock_timestamp()) ELSE l.expires_at END,
		metadata = CASE WHEN l.owner = $2 THEN '' ELSE l.metadata END,
		abandoned = CASE WHEN l.abandoned_until > clock_timestamp()
			THEN (l.abandoned || $2::text)[greatest(1, cardinality(l.abandoned) + 2 - %d):]
			ELSE ARRAY[$2::text] END,
		abandoned_until = greatest(l.abandoned_until, EXCLUDED.abandoned_until),
		waiters = array_remove(l.waiters, $WID),
		woken_until = CASE WHEN cardinality(array_remove(l.waiters, $WID)) = 0 THEN '-infinity'
			WHEN l.waiters[1] <> $WID AND l.woken_until > '-infinity' THEN l.woken_until
			WHEN NOT (l.owner IN ('', $2) OR l.expires_at <= clock_timestamp()) THEN '-infinity'
			WHEN pg_notify('$WAKE' || left((array_remove(l.waiters, $WID))[1], $DIDLEN),
				$1 || chr(2) || substr((array_remove(l.waiters, $WID))[1], $DIDLEN + 1)) IS NOT NULL
			THEN clock_timestamp() + interval '$WINDOW' END
	RETURNING l.waited
)
SELECT CASE WHEN waited THEN pg_notify($4, $1) IS NULL ELSE false END FROM up`, maxMarks)),
		// $1 the age in µs past its expiry of a row to delete.
		sweep: s(`
DELETE FROM $T WHERE ctid IN (
	SELECT ctid FROM $T
	WHERE greatest(expires_at + lock_delay * interval '1 microsecond', abandoned_until, delay_until, result_until) < clock_timestamp() - $1::bigint * interval '1 microsecond'
	FOR UPDATE SKIP LOCKED
)`),
		// $1 key, $2 owner, $3 the result, $4 its TTL in µs: stored beside
		// the lock if the owner holds it (the update locks the row, so that
		// the check and the write are one step); no row when it does not.
		putResult: s(`
UPDATE $T SET result = $3, result_until = clock_timestamp() + $4::bigint * interval '1 microsecond'
WHERE key = $1 AND owner = $2 AND expires_at > clock_timestamp()
RETURNING true`),
		// $1 key: its result, while it lives.
		getResult: s(`SELECT result FROM $T WHERE key = $1 AND result_until > clock_timestamp() AND result IS NOT NULL`),
		// $1 key: owner, token, metadata, time left, held, lock-delay left.
		inspect: s(`
SELECT owner, token, metadata, $REM, 1, owner <> '' AND expires_at > c.now, $DLEFT
FROM $T l, (SELECT clock_timestamp() AS now) c WHERE key = $1`),
		// $1 the pattern's literal prefix: held locks, and those in their
		// lock-delay (held false).
		list: s(`
SELECT key, owner, token, metadata, $REM, 1, owner <> '' AND expires_at > c.now, $DLEFT
FROM $T l, (SELECT clock_timestamp() AS now) c
WHERE (owner <> '' AND (expires_at > c.now OR lock_delay > 0) OR delay_until > c.now) AND starts_with(key, $1)`),
		// $1 key, $2 channel.
		forceUnlock: s(`
WITH cur AS (
	SELECT key, owner, token, metadata, $REM AS rem
	FROM $T l WHERE key = $1 AND owner <> '' AND expires_at > clock_timestamp() FOR NO KEY UPDATE
),` + free + `
SELECT owner, token, metadata, rem, 1, pg_notify($2, $1) IS NULL FROM cur`),
		// $1 key: owner, token, live; the row locked FOR KEY SHARE.
		fence: s(`
SELECT owner, token, owner <> '' AND expires_at > clock_timestamp()
FROM $T WHERE key = $1 FOR KEY SHARE`),
	}
	q.releaseAll = strings.Replace(q.release, "WHEN l.waited THEN", "WHEN true THEN", 1)
	q.abandonAll = strings.Replace(q.abandon, "WHEN waited THEN", "WHEN true THEN", 1)
	return q
}

// Migrate creates the Driver's tables (the locks', the fair locks' queue and
// the semaphores') and token sequence (and its schema, when WithTable
// names one) if they do not exist, and checks that existing tables have the
// columns of dlock tables (dlock.ErrConflict when not). It is safe to run
// concurrently and on every start.
func (d *Driver) Migrate(ctx context.Context) error {
	if d == nil {
		return errNilDriver
	}
	return d.doOn(ctx, "migrate", partNone, func(ctx context.Context) error { return d.migrate(ctx, partAll) })
}

// statements returns the statements that create the tables of p (and the
// token sequence), and the queries that check their columns.
func (d *Driver) statements(p part) (create, check []string) {
	create, check = d.q.migrate[:1], d.q.check[1:] // the sequence
	if p&partLocks != 0 {
		create, check = d.q.migrate, d.q.check
	}
	if p&partSem != 0 {
		create, check = append(create[:len(create):len(create)], d.semCreate), append(check[:len(check):len(check)], d.semCheck)
	}
	if p&partFair == partFair {
		create, check = append(create[:len(create):len(create)], d.fairCreate), append(check[:len(check):len(check)], d.fairCheck)
	}
	return create, check
}

// migrate creates the tables of p (and the token sequence) when missing, and
// checks their columns.
func (d *Driver) migrate(ctx context.Context, p part) error {
	create, check := d.statements(p)
	d.migrateMu.Lock()
	defer d.migrateMu.Unlock()
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		// Concurrent CREATE ... IF NOT EXISTS of one name can fail: take turns.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('dlock migrate ' || $1))`, d.cfg.table); err != nil {
			return err
		}
		if i := strings.IndexByte(d.cfg.table, '.'); i >= 0 {
			if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{d.cfg.table[:i]}.Sanitize()); err != nil {
				return err
			}
		}
		for _, q := range create {
			if _, err := tx.Exec(ctx, q); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	// Fence relies on the token being a key column (see buildQueries).
	var unique bool
	if p&partLocks == 0 {
		unique = true // the locks' table is not this request's
	} else if err := d.pool.QueryRow(ctx, `
SELECT EXISTS (
	SELECT FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
	WHERE i.indrelid = $1::regclass AND i.indisunique AND i.indnatts = 1
		AND i.indpred IS NULL AND i.indexprs IS NULL AND a.attname = 'token')`, d.table).Scan(&unique); err != nil {
		return err
	}
	if !unique {
		return errors.Join(driver.ErrConflict, fmt.Errorf("pglock: %s has no unique index on token, which fencing needs: not a dlock table", d.table))
	}
	for _, q := range check {
		rows, err := d.pool.Query(ctx, q)
		if err == nil {
			rows.Close()
			err = rows.Err()
		}
		if err != nil {
			if c := sqlState(err); strings.HasPrefix(c, "42") && c != "42501" {
				return errors.Join(driver.ErrConflict, fmt.Errorf("pglock: %s is not a dlock table: %w", d.table, err))
			}
			return err
		}
	}
	return nil
}
