// Package mysqllock is dlock's MySQL and MariaDB backend: leases with fencing
// tokens in an InnoDB table of the database a service already runs, through
// the caller's *sql.DB (github.com/go-sql-driver/mysql). It is a module of its
// own, so that programs using other backends never build a MySQL driver.
//
//	db, _ := sql.Open("mysql", "app:secret@tcp(db:3306)/app")
//	d, _ := mysqllock.NewDriver(db)
//	_ = d.Migrate(ctx) // once: creates the tables
//	locker, _ := mysqllock.New(db)
//	lease, err := locker.Lock(ctx, "orders:42")
//
// # Layout
//
// Every lock is one row of an InnoDB table (dlock_locks unless WithTable says
// otherwise): the key (at most 1024 bytes, dlock's longest), the holder's
// owner, its fencing token, its expiry as a DATETIME(6) of the server's clock
// in UTC (UTC_TIMESTAMP(6), the CURRENT_TIMESTAMP(6) of the time zone UTC, so
// that sessions of other time zones agree), and its metadata. A key's row is
// never deleted, and its token grows by one with every grant to a new owner,
// in the statement that grants: tokens of a key are strictly increasing, also
// across restarts of the server, as long as commits are durable
// (innodb_flush_log_at_trx_commit=1, the default). The table is created by
// Driver.Migrate, or by the first call that finds it missing when
// WithCreateTable is set; read-only calls never create it.
//
// Acquire is one statement: an UPDATE of the key's row (an INSERT ... ON
// DUPLICATE KEY UPDATE for a key's first), which takes over a row that is
// free, expired or that its owner already holds (a retry whose first reply
// was lost gets the same holding and token back), and otherwise leaves the
// holding as it is. The statement's outcome comes back in the reply's
// last-insert id (LAST_INSERT_ID(expr)): the token, or the holder's time left.
// A row that is free and that nobody waits for, the common case, is taken by
// a shorter statement (two thirds of the full one's cost to the server); when
// that one changes no row the full one follows, and the Driver sends the full
// one at once for that key for a second. Extend, Release and TTL are one
// statement each, owner-checked (a release that finds nobody waiting is a
// shorter one too); Extend never re-creates a row. The statements are sent as
// text with their values written as hexadecimal literals: one round trip
// each, no prepared statement. They rely on MySQL's left-to-right evaluation
// of the assignments of an UPDATE
// (MariaDB's SIMULTANEOUS_ASSIGNMENT sql_mode must stay off, as it is by
// default).
//
// # Waiting
//
// A waiting Lock does not poll. A Driver that has waiters or holders keeps
// two connections of the pool (taken with (*sql.DB).Conn) until a tenth of a
// second after its last user left: one holds a named lock of its own
// (GET_LOCK), the other, its sleeping connection, waits for that lock, which
// only a KILL QUERY ends. A waiter that finds the key held writes the sleeping
// connection's id into the key's row; the release (or the abandoned wait of
// the holder) takes the first id out of the row and sends KILL QUERY with it:
// the woken Driver's waiters try again at once. The release keeps the key for
// the Driver it woke for Reserve (the row, free, names that Driver's sleeping
// connection until then), so that its waiter gets the key rather than a
// releaser that locks again at once. A hand-over costs five statements: the
// release, the KILL QUERY, the waiter's acquisition, its Driver's next wait,
// and the failed attempt of whoever tried meanwhile (the releaser, in a loop). KILL QUERY of a connection of the same user needs no
// privilege; a server whose Clients log in as different users needs
// CONNECTION_ADMIN (MySQL) or CONNECTION ADMIN (MariaDB) for it. A wake-up can
// be lost (a KILL that came between two waits, one refused, a Driver that
// died): a waiter the row names tries again after WakeBackstop without one.
// (SELECT SLEEP is not the wait: on MariaDB a KILL QUERY of a SLEEP can take
// two seconds under load.) With WithPolling, waiters poll and the Driver
// keeps no connection.
//
// # Fair locks
//
// NewFair's locks (FairDriver) are the same rows, granted in arrival order: a
// waiting Lock that finds the key taken enters the key's queue (a table of its
// own, dlock_locks_fair), whose AUTO_INCREMENT column, drawn by the server,
// orders the waiters, and the row goes to the oldest live entry of the queue.
// A release reads the head's sleeping connection in its statement and wakes
// its Driver; a waiter that stops attempting is passed over after
// FairWaiterTTL. A fair and a plain lock of the same key exclude each other
// and share the key's tokens.
//
// # Told at once
//
// A holding's row names its Driver's sleeping connection too. ForceUnlock
// (and `dlock unlock --force`) sends KILL QUERY to it after its transaction:
// the Driver checks each of its holdings (one TTL statement each) and loses
// those that the table no longer has at once (dlock.LossStoreSignal). The
// cost: a force-unlock's KILL QUERY, two connections per Driver while it holds
// locks, and a TTL statement per holding of the Driver for each of its
// wake-ups (which waiters cause too).
//
// # Fencing inside the database
//
// Fence checks, inside the caller's own transaction, that a lease still holds
// its key, and keeps the lock row from changing hands until that transaction
// ends (a shared lock of the row): a write committed in the transaction is
// ordered before the grant of the key to anybody else. See Fence.
//
// # What is guaranteed
//
// One MySQL or MariaDB server orders every change of a row, so a key has at
// most one live holder. A lease expires no earlier than its TTL after the
// server started the statement that granted or extended it, which is after
// the start of the round trip the holder's local deadline counts from, and
// no statement of the holder moves it earlier: the server reads a statement's
// clock at its start, so one that started before a later one of the holder
// and ran after it (it waited for the row or for the CPU) would otherwise set
// it back. An Extend with a shorter TTL than is left therefore shortens the
// lease's local deadline and not the row's expiry. A failover to an asynchronous replica can lose the latest grants: see
// docs/safety.md.
package mysqllock

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// DefaultTable is the table of the locks unless WithTable names another.
const DefaultTable = "dlock_locks"

// DefaultRequestTimeout bounds every single request to the server when
// WithRequestTimeout is not given.
const DefaultRequestTimeout = 5 * time.Second

// AbandonMarkTTL is the shortest life of the mark of an abandoned acquisition
// (the acquisition's TTL when that is longer): an attempt still in flight when
// it was abandoned cannot take the key while the mark lives.
const AbandonMarkTTL = time.Minute

// Driver is the driver.Driver of a table of locks in MySQL or MariaDB. It is
// also a driver.Notifier, a driver.Abandoner, a driver.Resumer, a
// driver.BatchExtender, a driver.LockDelayer, a driver.TTLLimiter and a
// driver.Inspector. It holds no connection of its own except the sleeping one
// while it has waiters or holders: the caller creates the *sql.DB, shares it,
// and closes it after the last lock is released. It is safe for concurrent
// use.
type Driver struct {
	db    *sql.DB
	cfg   options
	table string // quoted, possibly qualified by its database
	sem   string // the semaphores' table, quoted
	sync  string // the latches' and barriers' table, quoted
	fair  string // the fair locks' queue, quoted
	w     *waker

	migrateMu sync.Mutex

	hot  hotKeys // keys found held or waited for by the common-case statements
	busy hotKeys // keys a fair lock's waiter found taken
}

// hotFor is how long a key whose row had waiters, or was held, when the
// Driver last tried its common-case statement counts as contended: the
// Driver sends the full statements for it at once.
const hotFor = time.Second

// maxHot bounds the keys the Driver remembers as contended; past it, it
// forgets them all.
const maxHot = 4096

// hotKeys are keys noted within hotFor.
type hotKeys struct {
	mu sync.Mutex
	m  map[string]time.Time // the keys, and until when they count
}

// has reports whether key was noted within hotFor.
func (h *hotKeys) has(key string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	until, ok := h.m[key]
	if ok && time.Now().After(until) {
		delete(h.m, key)
		return false
	}
	return ok
}

// note notes key.
func (h *hotKeys) note(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil || len(h.m) >= maxHot {
		h.m = map[string]time.Time{}
	}
	h.m[key] = time.Now().Add(hotFor)
}

var (
	_ driver.Driver        = (*Driver)(nil)
	_ driver.Notifier      = (*Driver)(nil)
	_ driver.Abandoner     = (*Driver)(nil)
	_ driver.Resumer       = (*Driver)(nil)
	_ driver.BatchExtender = (*Driver)(nil)
	_ driver.Inspector     = (*Driver)(nil)
	_ driver.TTLLimiter    = (*Driver)(nil)
	_ driver.LockDelayer   = (*Driver)(nil)
)

// Client is the dlock.Client that New returns: a dlock.Locker over a Driver,
// and a driver.Inspector through it.
type Client = dlock.Client

// New returns a Client that locks in the DefaultTable of db's database, with
// opts as the defaults of every TryLock and Lock. It does no I/O: create the
// table first with Driver.Migrate (or use NewDriver with WithCreateTable). It
// returns an error matching dlock.ErrInvalid for a nil db or a bad option.
func New(db *sql.DB, opts ...dlock.Option) (*Client, error) {
	d, err := NewDriver(db)
	if err != nil {
		return nil, err
	}
	return NewClient(d, opts...)
}

// NewClient returns a Client over d (a Driver made with options), with opts as
// the defaults of every TryLock and Lock. It returns an error matching
// dlock.ErrInvalid for a nil driver or a bad option; it does no I/O.
func NewClient(d *Driver, opts ...dlock.Option) (*Client, error) {
	if d == nil {
		return nil, errNilDriver
	}
	return dlock.NewClient(d, opts...)
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// NewDriver returns a Driver over db configured by opts. It does no I/O. It
// returns an error matching dlock.ErrInvalid for a nil db or a bad option.
func NewDriver(db *sql.DB, opts ...Option) (*Driver, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: mysqllock: nil *sql.DB", driver.ErrInvalid)
	}
	cfg := options{table: DefaultTable, requestTimeout: DefaultRequestTimeout}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: mysqllock: nil option", driver.ErrInvalid)
		}
		o(&cfg)
	}
	if cfg.requestTimeout <= 0 {
		return nil, fmt.Errorf("%w: mysqllock: request timeout %v is not positive", driver.ErrInvalid, cfg.requestTimeout)
	}
	parts := strings.Split(cfg.table, ".")
	if len(parts) > 2 {
		return nil, fmt.Errorf("%w: mysqllock: table %q: at most database.table", driver.ErrInvalid, cfg.table)
	}
	for _, p := range parts {
		if !identRE.MatchString(p) || len(p) > 59 {
			return nil, fmt.Errorf("%w: mysqllock: table %q: names are letters, digits and '_', not starting with a digit, at most 59 bytes", driver.ErrInvalid, cfg.table)
		}
	}
	quote := func(suffix string) string {
		q := make([]string, len(parts))
		for i, p := range parts {
			if i == len(parts)-1 {
				p += suffix
			}
			q[i] = "`" + p + "`"
		}
		return strings.Join(q, ".")
	}
	d := &Driver{db: db, cfg: cfg, table: quote(""), sem: quote("_sem"), sync: quote("_sync"), fair: quote("_fair")}
	d.w = newWaker(d)
	return d, nil
}

// TTLLimits implements driver.TTLLimiter: dlock's defaults (DATETIME(6) has
// a resolution of a microsecond).
func (d *Driver) TTLLimits() driver.TTLLimits { return driver.DefaultTTLLimits }

// MaxLockDelay implements driver.LockDelayer: the key's row keeps the
// holding's lock-delay, which the server's clock counts.
func (d *Driver) MaxLockDelay() time.Duration { return driver.MaxLockDelay }

// Info implements driver.Driver: the mutex of MySQL.
func (d *Driver) Info() driver.DriverInfo {
	return driver.DriverInfo{Backend: "mysqllock", Kind: driver.KindMutex}
}

// now is the server's clock in every statement: the time the statement
// started, in UTC.
const now = "UTC_TIMESTAMP(6)"

// The codes of Acquire's reply (its last-insert id): a token is below
// codeAbandoned; codeQueue is a free row that a fair lock's queue holds back
// for its head; codeBusy plus the holder's time left in µs is busy.
const (
	codeAbandoned = int64(1) << 61
	codeQueue     = codeAbandoned + 1
	codeBusy      = int64(1) << 62
)

// lit writes s as a literal of the statement's text: hexadecimal, which
// needs no escaping and holds any bytes.
func lit(s string) string { return "X'" + hex.EncodeToString([]byte(s)) + "'" }

// num writes n as a literal.
func num(n int64) string { return strconv.FormatInt(n, 10) }

// micros is d in whole microseconds, rounded up.
func micros(d time.Duration) int64 { return int64((d + time.Microsecond - 1) / time.Microsecond) }

// renewed is the expiry of a live holding that a statement of its holder
// asks to last us (an SQL expression, in microseconds) from now: never earlier
// than the row's. The server reads the clock of a statement once, at its start
// (now); a statement that started before one the holder sent later and ran
// after it (it waited for the row, or for the CPU) would otherwise move the
// expiry back behind the deadline the later one's reply gave the holder. An
// expiry it keeps moves by a microsecond, so that the row changes and counts
// as extended.
func renewed(us string) string {
	until := now + ` + INTERVAL ` + us + ` MICROSECOND`
	return `IF(expires_at > ` + until + `, expires_at + INTERVAL 1 MICROSECOND, ` + until + `)`
}

// nl is the separator of the owners in a row's list of abandoned acquisitions.
const nl = "0x0a"

// maxAbandoned bounds the list of abandoned acquisitions of a row, in bytes:
// an abandonment that finds it longer starts it afresh.
const maxAbandoned = 8192 - 512

// grantable is the condition under which the row may go to owner O, whose
// Driver's sleeping connection is conn (old values of the row: it is
// evaluated before any column is assigned). A free row that a release
// reserved for the Driver it woke (see reserveSQL) goes to no other Driver
// until the reservation ends.
func grantable(o string, conn int64) string {
	return `((owner IN (X'', ` + o + `) OR expires_at <= ` + now + `) AND delay_until <= ` + now + `
		AND NOT (owner <> X'' AND expires_at <= ` + now + ` AND expires_at + INTERVAL lock_delay MICROSECOND > ` + now + `)
		AND NOT (owner = X'' AND holder_conn NOT IN (0, ` + num(conn) + `) AND expires_at > ` + now + `))`
}

// Reserve is how long a release that wakes a waiting Driver keeps the key for
// it: the woken Driver's waiter takes the key before the releaser, who locks
// again at once, or any other Driver can (a hand-over instead of a retaking by
// the releaser). A woken Driver whose waiter is gone keeps the others of the
// key waiting this long.
const Reserve = 100 * time.Millisecond

// reserveSQL is the assignment by which a statement that frees the row (its
// owner set to X” in the same statement) and takes out the first waiter
// (popWaiter, which must follow it: both read the list as it was) reserves the
// row for that waiter's Driver: holder_conn names it, and reserveUntil, after
// popWaiter, ends the reservation.
const reserveSQL = `holder_conn = IF(waiters = X'', 0, CAST(SUBSTRING_INDEX(waiters, ',', 1) AS UNSIGNED))`

// reserveUntil is the expiry of a row that reserveSQL reserved, or of one
// freed without a reservation (when the statement found no waiter).
var reserveUntil = `expires_at = IF(holder_conn = 0, LEAST(expires_at, ` + now + `), ` + now + ` + INTERVAL ` + num(micros(Reserve)) + ` MICROSECOND)`

// gone is the condition that owner O's acquisition was abandoned.
func gone(o string) string {
	return `(abandoned_until > ` + now + ` AND LOCATE(CONCAT(` + nl + `, ` + o + `, ` + nl + `), abandoned) > 0)`
}

// remaining is the µs until the row is free for others: the end of the
// holding, of its lock-delay, or 0.
const remaining = `GREATEST(0, TIMESTAMPDIFF(MICROSECOND, ` + now + `, GREATEST(expires_at, delay_until,
	IF(owner <> X'' AND lock_delay > 0, expires_at + INTERVAL lock_delay MICROSECOND, expires_at))))`

// grantedWaiters is the row's list of waiting Drivers after a grant to the
// Driver of sleeping connection conn: without it, unless keep (the Driver's
// other waiters of the key stay in it).
func grantedWaiters(conn int64, keep bool) string {
	if conn == 0 || keep {
		return "waiters"
	}
	c := lit(num(conn))
	return `IF(waiters = X'', waiters, TRIM(BOTH ',' FROM REPLACE(CONCAT(',', waiters, ','), CONCAT(',', ` + c + `, ','), ',')))`
}

// freeSQL is the statement of an acquisition that finds the key's row free
// and nobody waiting for it: the common case, in a statement that costs the
// server about two thirds of the full one (acquireSQL), which the
// acquisition sends when this one changed no row. It grants only a free row
// without waiters, without a live mark of an abandoned acquisition and
// without a lock-delay running (a free row's lock_delay is of no holding),
// and its token is the full statement's for a free row: one more.
// A fair lock's (fair set) also needs the key's queue empty.
func (d *Driver) freeSQL(r driver.AcquireRequest, conn int64, fair bool) string {
	q := `UPDATE ` + d.table + ` SET token = LAST_INSERT_ID(token + 1),
	expires_at = ` + now + ` + INTERVAL ` + num(micros(r.TTL)) + ` MICROSECOND, metadata = ` + lit(r.Metadata) + `,
	lock_delay = ` + num(micros(r.Delay)) + `, holder_conn = ` + num(conn) + `, owner = ` + lit(r.Owner) + `
WHERE lock_key = ` + lit(r.Key) + ` AND owner = X'' AND waiters = X'' AND holder_conn = 0
	AND delay_until <= ` + now + ` AND abandoned_until <= ` + now
	if fair {
		q += ` AND ` + d.queueHead("seq", r.Key) + ` IS NULL`
	}
	return q
}

// acquireSQL is the statements of one acquisition: an UPDATE of the key's row,
// and for a key without one an INSERT ... ON DUPLICATE KEY UPDATE with the
// same assignments (see the package's Layout). The first assignment (st)
// decides from the row as it was; the later ones
// read it. conn is the id of the Driver's sleeping connection (0 without),
// written as the holder's, and as a waiter's when r.Waiting (a plain
// lock's). A fair lock's statements (fair set) grant a row that is free for
// the owner only to the head of the key's queue, or when nobody queues (the
// owner's own live holding is granted again): a free row that the queue
// holds back answers codeQueue.
func (d *Driver) acquireSQL(r driver.AcquireRequest, conn int64, keep, fair bool) (update, insert string) {
	o := lit(r.Owner)
	ttl, delay := num(micros(r.TTL)), num(micros(r.Delay))
	waiters, granted := "waiters", grantedWaiters(conn, keep)
	if conn != 0 && !fair {
		c := lit(num(conn))
		if r.Waiting {
			waiters = `IF(waiters = X'', ` + c + `, IF(FIND_IN_SET(` + c + `, waiters) > 0 OR LENGTH(waiters) > 900, waiters, CONCAT(waiters, ',', ` + c + `)))`
		}
	}
	st, busy := `IF(`+grantable(o, conn)+`, 0, 1)`, num(codeBusy)+` + `+remaining
	if fair {
		st = `IF(` + grantable(o, conn) + `, IF(owner = ` + o + ` AND expires_at > ` + now + ` OR COALESCE(` + d.queueHead("owner", r.Key) + `, ` + o + `) = ` + o + `, 0, 3), 1)`
		busy = `IF(st = 3, ` + num(codeQueue) + `, ` + busy + `)`
	}
	set := `
	st = IF(` + gone(o) + `, 2, ` + st + `),
	token = IF(st = 0, LAST_INSERT_ID(IF(owner = ` + o + ` AND expires_at > ` + now + `, token, token + 1)),
		token + 0 * LAST_INSERT_ID(IF(st = 2, ` + num(codeAbandoned) + `, ` + busy + `))),
	waiters = IF(st = 0, ` + granted + `, ` + waiters + `),
	expires_at = IF(st = 0, IF(owner = ` + o + `, ` + renewed(ttl) + `, ` + now + ` + INTERVAL ` + ttl + ` MICROSECOND), expires_at),
	metadata = IF(st = 0, ` + lit(r.Metadata) + `, metadata),
	lock_delay = IF(st = 0, ` + delay + `, lock_delay),
	holder_conn = IF(st = 0, ` + num(conn) + `, holder_conn),
	owner = IF(st = 0, ` + o + `, owner)`
	update = `UPDATE ` + d.table + ` SET` + set + `
WHERE lock_key = ` + lit(r.Key)
	insert = `INSERT INTO ` + d.table + ` (lock_key, owner, token, expires_at, metadata, lock_delay, holder_conn)
VALUES (` + lit(r.Key) + `, ` + o + `, LAST_INSERT_ID(1), ` + now + ` + INTERVAL ` + ttl + ` MICROSECOND, ` + lit(r.Metadata) + `, ` + delay + `, ` + num(conn) + `)
ON DUPLICATE KEY UPDATE` + set
	return update, insert
}

// Acquire implements driver.Driver in one statement: take over the key's row
// when it is free, expired or r.Owner's already, and otherwise report the
// holder's time left (writing the Driver's sleeping connection into the row's
// waiters when r.Waiting: the Taken is then Queued, and the Client abandons
// the acquisition if it gives up).
func (d *Driver) Acquire(ctx context.Context, r driver.AcquireRequest) (driver.Grant, error) {
	if d == nil {
		return driver.Grant{}, errNilDriver
	}
	conn, gen, used := d.wakeable(ctx)
	defer used()
	keep := !d.cfg.poll && d.w.othersWait(r.Key, r.Owner)
	var code int64
	err := d.do(ctx, "acquire", func(ctx context.Context) error {
		var err error
		code, err = d.grant(ctx, r, conn, keep, false)
		return err
	})
	switch {
	case err != nil:
		return driver.Grant{}, err
	case code >= codeBusy:
		return driver.Grant{}, busyTaken(time.Duration(code-codeBusy)*time.Microsecond, gen, r.Waiting && conn != 0)
	}
	return d.granted(d, r, code, gen)
}

// grant sends the statements of one attempt of r (a fair lock's when fair,
// see acquireSQL) and returns the reply's code: a token, or codeAbandoned,
// codeQueue or codeBusy plus the holder's time left.
func (d *Driver) grant(ctx context.Context, r driver.AcquireRequest, conn int64, keep, fair bool) (int64, error) {
	var res sql.Result
	var err error
	if !d.hot.has(r.Key) {
		// The common case first: a free row that nobody waits for.
		if res, err = d.db.ExecContext(ctx, d.freeSQL(r, conn, fair)); err != nil {
			return 0, err
		}
		if n, err := res.RowsAffected(); err != nil || n > 0 {
			if err != nil {
				return 0, err
			}
			return res.LastInsertId()
		}
		d.hot.note(r.Key)
	}
	update, insert := d.acquireSQL(r, conn, keep, fair)
	if res, err = d.db.ExecContext(ctx, update); err != nil {
		return 0, err
	}
	if code, err := res.LastInsertId(); err != nil || code != 0 {
		return code, err
	}
	// No row: the key's first acquisition (the insert takes over a row that
	// another inserted meanwhile as the update would).
	if res, err = d.db.ExecContext(ctx, insert); err != nil {
		return 0, err
	}
	return res.LastInsertId()
}

// granted is the outcome of an attempt of r whose reply's code was not busy:
// a Grant for holder (the Driver of the lock's kind) when code is a token.
func (d *Driver) granted(holder driver.Driver, r driver.AcquireRequest, code int64, gen mark) (driver.Grant, error) {
	switch {
	case code == codeAbandoned:
		return driver.Grant{}, fmt.Errorf("%w: mysqllock: the acquisition of %q was abandoned", driver.ErrNotObtained, r.Key)
	case code <= 0 || code > codeAbandoned:
		return driver.Grant{}, errors.Join(driver.ErrConflict, fmt.Errorf("mysqllock: acquire of %q in %s answered %d", r.Key, d.table, code))
	}
	return driver.Grant{Token: uint64(code), TTL: r.TTL, Lost: d.w.hold(holder, r.Key, r.Owner, gen)}, nil
}

// WakeBackstop bounds how long a waiter that the row names sleeps without a
// wake-up before it tries again: a KILL QUERY can be lost (see the package's
// Waiting), and the holder's remaining TTL may be long.
const WakeBackstop = 500 * time.Millisecond

// busyTaken is the Taken of a busy key whose holder has remaining left: a waiter
// that the key names (queued) sleeps at most WakeBackstop without a wake-up.
func busyTaken(remaining time.Duration, m mark, queued bool) *driver.Taken {
	t := &driver.Taken{Remaining: remaining, Handle: m, Queued: queued}
	if queued {
		t.RetryAfter = WakeBackstop
		if remaining >= 0 && remaining+time.Millisecond < WakeBackstop {
			t.RetryAfter = remaining + time.Millisecond
		}
	}
	return t
}

// Extend implements driver.Driver: it moves the expiry of the owner's live row
// to ttl from now by the server's clock, never earlier than it is (see
// renewed): an Extend with a shorter TTL than is left shortens the lease's
// local deadline, not the row's expiry.
func (d *Driver) Extend(ctx context.Context, h driver.Holding, ttl time.Duration) (time.Duration, error) {
	if d == nil {
		return 0, errNilDriver
	}
	n, err := d.affected(ctx, "extend", `UPDATE `+d.table+` SET expires_at = `+renewed(num(micros(ttl)))+`
WHERE lock_key = `+lit(h.Key)+` AND owner = `+lit(h.Owner)+` AND expires_at > `+now)
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, notHeld(h.Key)
	}
	return ttl, nil
}

// ExtendMany implements driver.BatchExtender: one statement extends every
// live holding of reqs; when it moved fewer rows than reqs, a second one
// reads which are still held.
func (d *Driver) ExtendMany(ctx context.Context, reqs []driver.ExtendRequest) []driver.ExtendResult {
	out := make([]driver.ExtendResult, len(reqs))
	if d == nil {
		for i := range out {
			out[i].Err = errNilDriver
		}
		return out
	}
	if len(reqs) == 0 {
		return out
	}
	var ttl, match strings.Builder
	for i, r := range reqs {
		pair := `(lock_key = ` + lit(r.Holding.Key) + ` AND owner = ` + lit(r.Holding.Owner) + `)`
		ttl.WriteString(` WHEN ` + pair + ` THEN ` + num(micros(r.TTL)))
		if i > 0 {
			match.WriteString(" OR ")
		}
		match.WriteString(pair)
	}
	n, err := d.affected(ctx, "extend", `UPDATE `+d.table+` SET expires_at = `+renewed(`(CASE`+ttl.String()+` END)`)+`
WHERE (`+match.String()+`) AND expires_at > `+now)
	held := map[[2]string]bool{}
	if err == nil && int(n) < len(reqs) {
		err = d.do(ctx, "extend", func(ctx context.Context) error {
			rows, err := d.db.QueryContext(ctx, `SELECT lock_key, owner FROM `+d.table+` WHERE (`+match.String()+`) AND expires_at > `+now)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var k, o string
				if err := rows.Scan(&k, &o); err != nil {
					return err
				}
				held[[2]string{k, o}] = true
			}
			return rows.Err()
		})
	}
	for i, r := range reqs {
		switch {
		case err != nil:
			out[i].Err = err
		case int(n) < len(reqs) && !held[[2]string{r.Holding.Key, r.Holding.Owner}]:
			out[i].Err = notHeld(r.Holding.Key)
		default:
			out[i].TTL = r.TTL
		}
	}
	return out
}

// Resume implements driver.Resumer: one statement moves the expiry of the
// owner's live row to h.TTL from now, if the row still carries token, and
// names the Driver's sleeping connection as the holder's.
func (d *Driver) Resume(ctx context.Context, h driver.Holding, token uint64) (driver.Grant, error) {
	if d == nil {
		return driver.Grant{}, errNilDriver
	}
	return d.resume(ctx, d, h, token)
}

// resume takes up h with token for holder, the Driver of the lock's kind.
func (d *Driver) resume(ctx context.Context, holder driver.Driver, h driver.Holding, token uint64) (driver.Grant, error) {
	conn, gen, used := d.wakeable(ctx)
	defer used()
	n, err := d.affected(ctx, "resume", `UPDATE `+d.table+` SET expires_at = `+renewed(num(micros(h.TTL)))+`, holder_conn = `+num(conn)+`
WHERE lock_key = `+lit(h.Key)+` AND owner = `+lit(h.Owner)+` AND token = `+strconv.FormatUint(token, 10)+` AND expires_at > `+now)
	if err != nil {
		return driver.Grant{}, err
	}
	if n == 0 {
		return driver.Grant{}, notHeld(h.Key)
	}
	return driver.Grant{Token: token, TTL: h.TTL, Lost: d.w.hold(holder, h.Key, h.Owner, gen)}, nil
}

// popWaiter is the assignment that takes the first waiter out of the row's
// list and leaves its connection id in the reply's last-insert id (doubled,
// plus one when the holding was live: see release).
const popWaiter = `waiters = IF(waiters = X'', CONCAT(waiters, LEFT(LAST_INSERT_ID(expires_at >= ` + now + `), 0)),
		CONCAT(SUBSTRING(waiters, LENGTH(SUBSTRING_INDEX(waiters, ',', 1)) + 2),
			LEFT(LAST_INSERT_ID(2 * CAST(SUBSTRING_INDEX(waiters, ',', 1) AS UNSIGNED) + (expires_at >= ` + now + `)), 0)))`

// Release implements driver.Driver: it frees the owner's row (the row and its
// token stay) and wakes the Driver of the first of the row's waiters. An
// expired row of the owner is freed too, and reported as dlock.ErrNotHeld;
// a holding in its lock-delay is left to it.
func (d *Driver) Release(ctx context.Context, h driver.Holding) error {
	if d == nil {
		return errNilDriver
	}
	var n, code int64
	where := releaseWhere(h)
	lean := !d.hot.has(h.Key)
	err := d.do(ctx, "release", func(ctx context.Context) error {
		var res sql.Result
		var err error
		if lean {
			// Nobody waiting, the common case, in a statement that the
			// server runs at half the cost of the one that wakes a waiter.
			if res, err = d.db.ExecContext(ctx, `UPDATE `+d.table+` SET holder_conn = 0 * LAST_INSERT_ID(expires_at >= `+now+`),
	expires_at = LEAST(expires_at, `+now+`), metadata = X'', owner = X''`+where+` AND waiters = X''`); err != nil {
				return err
			}
			if n, err = res.RowsAffected(); err != nil || n > 0 {
				if err == nil {
					code, err = res.LastInsertId()
				}
				return err
			}
			d.hot.note(h.Key)
		}
		// The live bit of popWaiter reads the holding's expiry before
		// reserveUntil changes it.
		n, code, err = d.execCode(ctx, `UPDATE `+d.table+` SET `+reserveSQL+`, `+popWaiter+`,
	`+reserveUntil+`, metadata = X'', owner = X''`+where)
		return err
	})
	if err != nil {
		return err
	}
	if n == 0 {
		return notHeld(h.Key)
	}
	d.w.wakeKey(h.Key)
	d.wake(ctx, h.Key, code/2)
	if code%2 == 0 {
		return notHeld(h.Key)
	}
	return nil
}

// releaseWhere is the condition of a release of h: the owner's row, unless it
// expired into its lock-delay.
func releaseWhere(h driver.Holding) string {
	return `
WHERE lock_key = ` + lit(h.Key) + ` AND owner = ` + lit(h.Owner) + ` AND (lock_delay = 0 OR expires_at > ` + now + `)`
}

// wake sends KILL QUERY to the sleeping connection conn, popped from key's
// waiters; when that connection is gone, it pops and wakes the next waiter
// of a free row, a few times at most. Failures are not the caller's: the
// waiters sleep at most the holder's TTL.
func (d *Driver) wake(ctx context.Context, key string, conn int64) {
	for try := 0; conn > 0 && try < 3; try++ {
		err := d.do(ctx, "wake", func(ctx context.Context) error {
			_, err := d.db.ExecContext(ctx, "KILL QUERY "+num(conn))
			return err
		})
		if errorNumber(err) != errUnknownThread {
			return
		}
		conn = 0
		_ = d.do(ctx, "wake", func(ctx context.Context) error {
			// A free row's reservation for the gone connection moves to
			// the next waiter, or ends; an expired holding's row keeps
			// its holder.
			dead := num(conn)
			res, err := d.db.ExecContext(ctx, `UPDATE `+d.table+` SET
	holder_conn = IF(owner = X'', IF(waiters = X'', 0, CAST(SUBSTRING_INDEX(waiters, ',', 1) AS UNSIGNED)), holder_conn), `+popWaiter+`,
	expires_at = IF(owner = X'', IF(holder_conn = 0, LEAST(expires_at, `+now+`), `+now+` + INTERVAL `+num(micros(Reserve))+` MICROSECOND), expires_at)
WHERE lock_key = `+lit(key)+` AND (waiters <> X'' AND (owner = X'' OR expires_at <= `+now+`) OR owner = X'' AND holder_conn = `+dead+`)`)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil || n == 0 {
				return err
			}
			code, err := res.LastInsertId()
			conn = code / 2
			return err
		})
	}
}

// TTL implements driver.Driver: the time the owner's row has left by the
// server's clock.
func (d *Driver) TTL(ctx context.Context, h driver.Holding) (time.Duration, error) {
	if d == nil {
		return 0, errNilDriver
	}
	var us int64
	found := false
	err := d.do(ctx, "ttl", func(ctx context.Context) error {
		err := d.db.QueryRowContext(ctx, `SELECT TIMESTAMPDIFF(MICROSECOND, `+now+`, expires_at) FROM `+d.table+`
WHERE lock_key = `+lit(h.Key)+` AND owner = `+lit(h.Owner)+` AND expires_at > `+now).Scan(&us)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		found = err == nil
		return err
	})
	if err != nil {
		return 0, err
	}
	if !found {
		return 0, notHeld(h.Key)
	}
	return time.Duration(us) * time.Microsecond, nil
}

// Abandon implements driver.Abandoner: it frees the owner's row if the owner
// holds it (waking the next waiter), and marks the acquisition abandoned in
// the key's row for AbandonMarkTTL (or h.TTL when longer), so that an attempt
// of the owner still in flight cannot take the key. An attempt meets the mark
// whatever the order: both write the same row, and the server orders the two
// writes. A key without a row gets one, free, with token 0.
func (d *Driver) Abandon(ctx context.Context, h driver.Holding) error {
	if d == nil {
		return errNilDriver
	}
	o := lit(h.Owner)
	mark := now + ` + INTERVAL ` + num(micros(max(h.TTL, AbandonMarkTTL))) + ` MICROSECOND`
	// A waiter leaves the row's list of waiting Drivers, and a reservation
	// for its Driver ends, unless the Driver has other waiters of the key.
	var conn int64
	keep := true
	if !d.cfg.poll {
		conn = d.w.sleeperID()
		keep = conn == 0 || d.w.othersWait(h.Key, h.Owner)
	}
	mine := "FALSE"
	if !keep {
		mine = `(owner = X'' AND holder_conn = ` + num(conn) + `)`
	}
	var code int64
	err := d.do(ctx, "abandon", func(ctx context.Context) error {
		res, err := d.db.ExecContext(ctx, `INSERT INTO `+d.table+` (lock_key, owner, token, expires_at, metadata, abandoned, abandoned_until)
VALUES (`+lit(h.Key)+`, X'', 0 * LAST_INSERT_ID(0), `+now+`, X'', CONCAT(`+nl+`, `+o+`, `+nl+`), `+mark+`)
ON DUPLICATE KEY UPDATE
	abandoned = IF(abandoned_until > `+now+` AND LENGTH(abandoned) < `+num(maxAbandoned)+`, CONCAT(abandoned, `+o+`, `+nl+`), CONCAT(`+nl+`, `+o+`, `+nl+`)),
	abandoned_until = GREATEST(abandoned_until, `+mark+`),
	waiters = IF(owner = `+o+` AND waiters <> X'', CONCAT(SUBSTRING(waiters, LENGTH(SUBSTRING_INDEX(waiters, ',', 1)) + 2),
		LEFT(LAST_INSERT_ID(2 * CAST(SUBSTRING_INDEX(waiters, ',', 1) AS UNSIGNED)), 0)), `+grantedWaiters(conn, keep)+`),
	expires_at = IF(owner = `+o+` OR `+mine+`, LEAST(expires_at, `+now+`), expires_at),
	metadata = IF(owner = `+o+`, X'', metadata),
	holder_conn = IF(owner = `+o+` OR `+mine+`, 0, holder_conn),
	owner = IF(owner = `+o+`, X'', owner)`)
		if err != nil {
			return err
		}
		code, err = res.LastInsertId()
		return err
	})
	if err == nil {
		d.wake(ctx, h.Key, code/2)
	}
	return err
}

// execCode runs the statement q and returns the rows it changed and its
// reply's last-insert id.
func (d *Driver) execCode(ctx context.Context, q string) (n, code int64, err error) {
	res, err := d.db.ExecContext(ctx, q)
	if err != nil {
		return 0, 0, err
	}
	if n, err = res.RowsAffected(); err != nil {
		return 0, 0, err
	}
	code, err = res.LastInsertId()
	return n, code, err
}

// affected runs one statement and returns the rows it changed.
func (d *Driver) affected(ctx context.Context, op, q string) (int64, error) {
	var n int64
	err := d.do(ctx, op, func(ctx context.Context) error {
		res, err := d.db.ExecContext(ctx, q)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}

// do runs one request on the Driver's tables (see doOn).
func (d *Driver) do(ctx context.Context, op string, f func(ctx context.Context) error) error {
	return d.doOn(ctx, op, true, f)
}

// doOn runs one request bounded by the request timeout, creates the tables
// and runs it again when one is missing, create is set and WithCreateTable is
// set (an inspection creates nothing), and maps its error onto the dlock
// sentinels.
func (d *Driver) doOn(ctx context.Context, op string, create bool, f func(ctx context.Context) error) error {
	if ctx == nil {
		return fmt.Errorf("%w: mysqllock: nil context", driver.ErrInvalid)
	}
	rctx := ctx
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > d.cfg.requestTimeout {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(ctx, d.cfg.requestTimeout)
		defer cancel()
	}
	err := f(rctx)
	if err != nil && create && d.cfg.createTable && errorNumber(err) == errNoSuchTable {
		if err = d.migrate(rctx); err == nil {
			err = f(rctx)
		}
	}
	return d.mapErr(ctx, rctx, op, err)
}

// notHeld is the error of a call about a holding that is gone.
func notHeld(key string) error {
	return fmt.Errorf("%w: mysqllock: %q is not held by this owner", driver.ErrNotHeld, key)
}

var errNilDriver = fmt.Errorf("%w: mysqllock: nil driver", driver.ErrInvalid)
