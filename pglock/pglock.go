// Package pglock is dlock's PostgreSQL backend: exclusive leases with fencing
// tokens in a table of the database a service already runs, through the
// caller's pgx v5 pool. It is a module of its own, so that programs using other
// backends never build pgx.
//
//	pool, _ := pgxpool.New(ctx, "postgres://app@db/app")
//	d, _ := pglock.NewDriver(pool)
//	_ = d.Migrate(ctx) // once: creates the table and the token sequence
//	locker, _ := pglock.New(pool)
//	lease, err := locker.Lock(ctx, "orders:42")
//
// # Layout
//
// Every lock is one row of a table (dlock_locks unless WithTable says
// otherwise): the key, the holder's owner, its fencing token, its expiry as a
// timestamp of the database's clock, and its metadata. Tokens come from one
// sequence (the table's name with "_token" appended): global, strictly
// increasing, and never reused, also across restarts of the server. A grant
// draws its token while it holds the lock of the key's row, after every
// earlier grant of the key committed, so every token of a key is greater than
// every earlier one. The table is created by
// Driver.Migrate, or by the first call that finds it missing when
// WithCreateTable is set.
//
// Acquire is one statement: an UPDATE of the key's row in place, which takes
// over a row that is free, expired or that its owner already holds (a retry
// whose first reply was lost gets the same holding and token back), and
// otherwise reports the holder's remaining time, putting the caller in the
// row's queue of waiters when it will wait. A key's first acquisition (or its first after
// Sweep) inserts the row, a second statement. An acquisition waits at most
// 200ms for the lock of the row (held for longer only by a transaction fenced
// on the key, see Fence), and the key is busy meanwhile. Extend and Release
// change the row only if it is still the owner's (Extend only if it has not
// expired; it never re-creates a row). Expiry is read and written by the
// database's clock alone (clock_timestamp()), so the clocks of the processes
// that lock do not matter. WithUnlogged keeps the rows out of the
// write-ahead log, at the price of losing every lock in a crash of the server.
//
// # Waiting
//
// A Lock that finds the key held joins the row's queue of waiters (under its
// Driver's random id and the last 16 characters of its owner, which are
// random too). A release wakes the first waiter of the queue alone: it sends a
// NOTIFY on that waiter's Driver's own channel ("dlock_wake_" and the
// Driver's id) whose payload names the key and the waiter, and keeps the
// row for that waiter for a tenth of a second, so that neither the releasing
// process nor a newcomer takes the lock from under it; an uncontended release
// sends none. A Driver that has waiters keeps one dedicated connection
// (outside the pool, with the pool's connection settings) LISTENing on its
// channel and on the table's (named after the table), until a tenth of a
// second after its last waiter left, and wakes the waiter a notification
// names. The woken waiter takes the lock and leaves the queue. A waiter that
// gives up leaves the queue (Abandon) and, when the row is free, wakes the
// next waiter in its place, so that a wake-up it received is passed on. A
// waiter that finds the queue full (64 waiters) marks the row instead, and
// the next release also wakes every waiter of the key (a NOTIFY on the
// table's channel with the key as payload), as a forced unlock does (and as
// a release does after a waiter of a Driver of an earlier version marked the
// row). A wake-up can be lost (the listening connection broke, the server
// restarted, the woken waiter's process died): the other waiters then sleep
// at most the holder's remaining TTL, as with Redis (a process that tries
// meanwhile gets the lock when the tenth of a second has passed), and a dead
// waiter costs that once, since the next grant takes it out of the queue. An
// expiry sends nothing; waiters wake when the holder's TTL has passed. Where
// LISTEN is refused, or with WithPolling (for a pooler in transaction mode,
// which does not carry notifications), waiters poll and do not queue.
//
// # Fencing inside the database
//
// Fence (and FenceSQL for database/sql) checks, inside the caller's own
// transaction, that a lease still holds its key, and keeps the lock row from
// changing hands until that transaction ends: a write committed in the
// transaction is ordered before the grant of the key to anybody else. See
// Fence and docs/postgres.md for the exact guarantee and its limits.
//
// # Semaphores and fair locks
//
// NewSemaphore and NewSemaphoreDriver give counting semaphores of n permits in
// a table of their own (see SemaphoreDriver); NewFair and NewFairDriver give
// exclusive locks granted in arrival order (see FairDriver).
//
// # What is guaranteed
//
// One PostgreSQL server orders every change of a row, so a key has at most one
// live holder. A lease expires no earlier than its TTL after the server ran the
// statement that granted or extended it, which is after the start of the round
// trip the holder's local deadline counts from. Tokens survive restarts as long
// as commits are durable (synchronous_commit on, the default). A failover to an
// asynchronous replica can lose the latest grants: see docs/safety.md.
package pglock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
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

// maxMarks is the most abandoned acquisitions a row remembers at once; the
// oldest are forgotten first.
const maxMarks = 128

// Driver is the driver.Driver of a table of locks in PostgreSQL. It is also a
// driver.Notifier, a driver.Abandoner, a driver.TTLLimiter and a
// driver.Inspector. It holds no connection of its own except the listening one
// while it has waiters: the caller creates the pool, shares it, and closes it
// after the last lock is released. It is safe for concurrent use.
type Driver struct {
	in      inspection // its Inspect, ListPrefix and ForceUnlock
	pool    *pgxpool.Pool
	cfg     options
	table   string // quoted, possibly schema-qualified
	seq     string // quoted
	channel string // the NOTIFY channel, unquoted
	id      string // random: its waiters' entries in queues start with it (see waiterIDLen)
	q       queries
	semQ    semQueries
	fairQ   fairQueries
	ln      *listener

	// The statements that create and check the semaphores' and the fair
	// locks' tables (q.migrate and q.check: the sequence and the locks').
	semCreate, semCheck, fairCreate, fairCheck string

	migrateMu sync.Mutex
}

var (
	_ driver.Driver     = (*Driver)(nil)
	_ driver.Notifier   = (*Driver)(nil)
	_ driver.Abandoner  = (*Driver)(nil)
	_ driver.Inspector  = (*Driver)(nil)
	_ driver.TTLLimiter = (*Driver)(nil)

	_ driver.LockDelayer = (*Driver)(nil)
)

// Client is the dlock.Client that New returns: a dlock.Locker over a Driver,
// and a driver.Inspector through it.
type Client = dlock.Client

// New returns a Client that locks in the DefaultTable of pool's database, with
// opts as the defaults of every TryLock and Lock. It does no I/O: create the
// table first with Driver.Migrate (or use NewDriver with WithCreateTable). It
// returns an error matching dlock.ErrInvalid for a nil pool or a bad option.
func New(pool *pgxpool.Pool, opts ...dlock.Option) (*Client, error) {
	d, err := NewDriver(pool)
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

// NewDriver returns a Driver over pool configured by opts. It does no I/O. It
// returns an error matching dlock.ErrInvalid for a nil pool or a bad option.
func NewDriver(pool *pgxpool.Pool, opts ...Option) (*Driver, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: pglock: nil pool", driver.ErrInvalid)
	}
	cfg := options{table: DefaultTable, requestTimeout: DefaultRequestTimeout}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: pglock: nil option", driver.ErrInvalid)
		}
		o(&cfg)
	}
	if cfg.requestTimeout <= 0 {
		return nil, fmt.Errorf("%w: pglock: request timeout %v is not positive", driver.ErrInvalid, cfg.requestTimeout)
	}
	parts := strings.Split(cfg.table, ".")
	if len(parts) > 2 {
		return nil, fmt.Errorf("%w: pglock: table %q: at most schema.table", driver.ErrInvalid, cfg.table)
	}
	for _, p := range parts {
		if !identRE.MatchString(p) || len(p) > 57 {
			return nil, fmt.Errorf("%w: pglock: table %q: names are letters, digits and '_', not starting with a digit, at most 57 bytes", driver.ErrInvalid, cfg.table)
		}
	}
	seqParts := append([]string(nil), parts...)
	seqParts[len(seqParts)-1] += "_token"
	semParts := append([]string(nil), parts...)
	semParts[len(semParts)-1] += "_sem"
	queueParts := append([]string(nil), parts...)
	queueParts[len(queueParts)-1] += "_queue"
	d := &Driver{
		pool:    pool,
		cfg:     cfg,
		table:   pgx.Identifier(parts).Sanitize(),
		seq:     pgx.Identifier(seqParts).Sanitize(),
		channel: cfg.table,
	}
	d.id = fmt.Sprintf("%0*x", driverIDLen, rand.Uint64())
	d.q = buildQueries(d.table, d.seq, d.channel, d.id)
	d.semQ, d.semCreate, d.semCheck = buildSemQueries(pgx.Identifier(semParts).Sanitize(), d.seq)
	d.fairQ, d.fairCreate, d.fairCheck = buildFairQueries(d.table, pgx.Identifier(queueParts).Sanitize(), d.seq)
	if cfg.unlogged {
		unlogged := func(q string) string {
			return strings.Replace(q, "CREATE TABLE IF NOT EXISTS", "CREATE UNLOGGED TABLE IF NOT EXISTS", 1)
		}
		d.q.migrate = append([]string(nil), d.q.migrate...)
		for i, q := range d.q.migrate {
			d.q.migrate[i] = unlogged(q)
		}
		d.semCreate, d.fairCreate = unlogged(d.semCreate), unlogged(d.fairCreate)
	}
	d.in = inspection{d: d, kind: driver.KindMutex, inspect: d.q.inspect, list: d.q.list, forceUnlock: d.q.forceUnlock}
	d.ln = newListener(d)
	return d, nil
}

// TTLLimits implements driver.TTLLimiter: dlock's defaults (timestamps in
// PostgreSQL have a resolution of a microsecond).
func (d *Driver) TTLLimits() driver.TTLLimits { return driver.DefaultTTLLimits }

// micros is d in whole microseconds, rounded up.
func micros(d time.Duration) int64 { return int64((d + time.Microsecond - 1) / time.Microsecond) }

// acquireLockWait bounds how long an acquisition waits for the lock of the
// key's row. A statement holds it for a moment; a transaction fenced on the
// key (see Fence) until it ends, and the key counts as busy meanwhile.
const acquireLockWait = 200 * time.Millisecond

// Acquire implements driver.Driver in one statement: take over the key's row
// when it is free, expired or r.Owner's already (leaving the row's queue of
// waiters), and otherwise report the holder's time left (joining the queue
// when r.Waiting and the Driver is notified: the Taken is then Queued, and
// the Client abandons the acquisition if it gives up). A key
// without a row (its first acquisition, or its first after Sweep) costs a
// second statement, which inserts it. The key is busy (with an unknown
// remaining time) while a transaction fenced on it is open.
func (d *Driver) Acquire(ctx context.Context, r driver.AcquireRequest) (driver.Grant, error) {
	if d == nil {
		return driver.Grant{}, errNilDriver
	}
	if err := checkMetadata(r.Metadata); err != nil {
		return driver.Grant{}, err
	}
	var state int
	var token, remaining int64
	found, locked := false, false
	// What the listener has received before the attempt: a waiter that
	// subscribes after it is woken at once only if a notification for it
	// may have come meanwhile. A waiter that will be notified joins the
	// row's queue of waiters.
	var mark any
	queue := false
	if r.Waiting && !d.cfg.poll {
		mark, queue = d.ln.mark(r.Key, waiterID(r.Owner))
	}
	if !d.cfg.poll && d.ln.keep() {
		defer d.ln.release() // after the grant's hold, which keeps it on
	}
	sent := time.Now()
	err := d.do(ctx, "acquire", func(ctx context.Context) error {
		err := d.acquire(ctx, r, queue, func(s int, t, rem int64) { found, state, token, remaining = true, s, t, rem })
		if err != nil && sqlState(err) == "55P03" {
			locked = true // a transaction fenced on the key holds its row
			return nil
		}
		return err
	})
	// A waiter that may be in the queue leaves it (Abandon) when it gives
	// up: a release may have woken it, and the next waiter is woken in its
	// place.
	if err == nil && locked {
		return driver.Grant{}, &driver.Taken{Remaining: -1, Handle: mark, Queued: queue}
	}
	switch {
	case err != nil:
		return driver.Grant{}, err
	case !found:
		// The row that kept us out was written after this statement's
		// snapshot: held, for a time we cannot tell.
		return driver.Grant{}, &driver.Taken{Remaining: -1, Handle: mark, Queued: queue}
	case state == stateGranted:
		if token <= 0 {
			return driver.Grant{}, errors.Join(driver.ErrConflict, fmt.Errorf("pglock: token %d in %s", token, d.table))
		}
		return driver.Grant{Token: uint64(token), TTL: r.TTL, Lost: d.ln.hold(d, r.Key, r.Owner, sent)}, nil
	case state == stateAbandoned:
		return driver.Grant{}, fmt.Errorf("%w: pglock: the acquisition of %q was abandoned", driver.ErrNotObtained, r.Key)
	}
	return driver.Grant{}, &driver.Taken{Remaining: max(time.Duration(remaining)*time.Microsecond, 0), Handle: mark, Queued: queue}
}

// MaxLockDelay implements driver.LockDelayer: the key's row keeps the
// holding's lock-delay, which the database's clock counts (see
// docs/safety.md).
func (d *Driver) MaxLockDelay() time.Duration { return driver.MaxLockDelay }

// Info implements driver.Driver: the mutex of PostgreSQL.
func (d *Driver) Info() driver.DriverInfo {
	return driver.DriverInfo{Backend: "pglock", Kind: driver.KindMutex}
}

// acquire runs the acquisition statement (which puts the owner in the row's
// queue of waiters when queue is set and the key is busy) and passes its
// row, if any, to row. A key without a row gets one inserted (a second
// statement); when another acquisition inserted it first, the update runs
// again.
func (d *Driver) acquire(ctx context.Context, r driver.AcquireRequest, queue bool, row func(state int, token, remaining int64)) error {
	var res struct {
		state            int
		token, remaining int64
	}
	for i := 0; ; i++ {
		err := d.pool.QueryRow(ctx, d.q.acquire, r.Key, r.Owner, micros(r.TTL), r.Metadata, queue, micros(r.Delay)).
			Scan(&res.state, &res.token, &res.remaining)
		if err == nil {
			row(res.state, res.token, res.remaining)
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) || i == 1 {
			if errors.Is(err, pgx.ErrNoRows) {
				err = nil // the row is gone again (Sweep): busy for now
			}
			return err
		}
		err = d.pool.QueryRow(ctx, d.q.insert, r.Key, r.Owner, micros(r.TTL), r.Metadata, micros(r.Delay)).Scan(&res.token)
		if err == nil {
			row(stateGranted, res.token, 0)
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
	}
}

// Extend implements driver.Driver: it moves the expiry of the owner's live row
// to ttl from now by the database's clock.
func (d *Driver) Extend(ctx context.Context, h driver.Holding, ttl time.Duration) (time.Duration, error) {
	if d == nil {
		return 0, errNilDriver
	}
	return d.extend(ctx, d.q.extend, h, ttl)
}

// extend runs the extend statement q ($1 key, $2 owner, $3 ttl in µs) of a
// lock table.
func (d *Driver) extend(ctx context.Context, q string, h driver.Holding, ttl time.Duration) (time.Duration, error) {
	var n int64
	err := d.do(ctx, "extend", func(ctx context.Context) error {
		tag, err := d.pool.Exec(ctx, q, h.Key, h.Owner, micros(ttl))
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, notHeld(h.Key)
	}
	return ttl, nil
}

// Release implements driver.Driver: it frees the owner's row (the row and its
// token stay; see Sweep) and wakes the first of the row's queue of waiters.
// An expired row of the owner is freed too, and reported as dlock.ErrNotHeld.
func (d *Driver) Release(ctx context.Context, h driver.Holding) error {
	if d == nil {
		return errNilDriver
	}
	return d.release(ctx, d.q.release, h, h.Key, h.Owner)
}

// release runs the release statement q of a lock table with args (a row of
// whether the holding was live and whether a notification was sent, when the
// owner had one).
func (d *Driver) release(ctx context.Context, q string, h driver.Holding, args ...any) error {
	var live, found, notified bool
	err := d.do(ctx, "release", func(ctx context.Context) error {
		err := d.pool.QueryRow(ctx, q, args...).Scan(&live, &notified)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		found = err == nil
		return err
	})
	if err != nil {
		return err
	}
	if !found || !live {
		return notHeld(h.Key)
	}
	return nil
}

// TTL implements driver.Driver: the time the owner's row has left by the
// database's clock.
func (d *Driver) TTL(ctx context.Context, h driver.Holding) (time.Duration, error) {
	if d == nil {
		return 0, errNilDriver
	}
	return d.ttl(ctx, d.q.ttl, h)
}

// ttl runs the TTL statement q of a lock table ($1 key, $2 owner).
func (d *Driver) ttl(ctx context.Context, q string, h driver.Holding) (time.Duration, error) {
	var us int64
	found := false
	err := d.do(ctx, "ttl", func(ctx context.Context) error {
		err := d.pool.QueryRow(ctx, q, h.Key, h.Owner).Scan(&us)
		if errors.Is(err, pgx.ErrNoRows) {
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
// holds it, takes the owner out of the row's queue of waiters (waking the
// first waiter left in it when the row is free: a wake-up the owner received
// is passed on), and marks the acquisition abandoned in the key's row for
// AbandonMarkTTL (or h.TTL when longer), so that an attempt of the owner still
// in flight cannot take the key (nor join the queue again). An attempt meets the mark whatever the order:
// both write the same row, and the database orders the two writes.
func (d *Driver) Abandon(ctx context.Context, h driver.Holding) error {
	if d == nil {
		return errNilDriver
	}
	return d.do(ctx, "abandon", func(ctx context.Context) error {
		_, err := d.pool.Exec(ctx, d.q.abandon, h.Key, h.Owner, micros(max(h.TTL, AbandonMarkTTL)), d.channel)
		return err
	})
}

// SweepAfter is how long after its expiry (or its release) Sweep leaves a
// row. A row keeps its key's newest token; once it is deleted, the key's next
// token comes from the sequence, which is still greater than every earlier
// token unless an acquisition statement stalled for longer than SweepAfter
// inside the server between drawing its token and inserting its row.
const SweepAfter = time.Hour

// Sweep deletes the rows of locks, semaphore permits and fair-lock waiters
// that nobody has held (or renewed) for SweepAfter and that carry no live
// abandonment mark, skipping rows locked by a transaction, and returns how
// many it deleted. Released and expired locks keep their row (with the key's
// newest token) until Sweep removes it: run it now and then where keys are
// many and short-lived (one per order, say).
func (d *Driver) Sweep(ctx context.Context) (int64, error) {
	if d == nil {
		return 0, errNilDriver
	}
	var n int64
	err := d.doOn(ctx, "sweep", partNone, func(ctx context.Context) error {
		n = 0
		for _, q := range []string{d.q.sweep, d.semQ.sweep, d.fairQ.sweep} {
			tag, err := d.pool.Exec(ctx, q, micros(SweepAfter))
			if undefinedTable(err) {
				continue // a kind of lock never used here: nothing to sweep
			}
			if err != nil {
				return err
			}
			n += tag.RowsAffected()
		}
		return nil
	})
	return n, err
}

// part names the tables a request uses, which it creates when they are
// missing and WithCreateTable is set (see doOn).
type part int

const (
	partNone  part = 0             // inspection: creates nothing
	partLocks part = 1             // the locks' table and the token sequence
	partSem   part = 2             // the semaphores' table and the token sequence
	partFair  part = 4 | partLocks // the fair locks' queue, and the locks' table
	partAll        = partLocks | partSem | partFair
)

// do runs one request on the locks' table (see doOn).
func (d *Driver) do(ctx context.Context, op string, f func(ctx context.Context) error) error {
	return d.doOn(ctx, op, partLocks, f)
}

// doOn runs one request bounded by the request timeout, creates the tables of
// p and runs it again when one is missing and WithCreateTable is set (an
// inspection, p partNone, creates nothing; a locks' table of an earlier
// layout gets its missing column the same way), and maps its error onto the
// dlock sentinels.
func (d *Driver) doOn(ctx context.Context, op string, p part, f func(ctx context.Context) error) error {
	if ctx == nil {
		return fmt.Errorf("%w: pglock: nil context", driver.ErrInvalid)
	}
	rctx := ctx
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > d.cfg.requestTimeout {
		// (A caller's deadline within the bound bounds the request
		// already, without another timer.)
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(ctx, d.cfg.requestTimeout)
		defer cancel()
	}
	err := f(rctx)
	if err != nil && rctx.Err() == nil && connectionGone(err) {
		// A pooled connection the server had closed before it read the
		// request: the request did not run, and a fresh connection may.
		err = f(rctx)
	}
	if err != nil && d.cfg.createTable && p != partNone && (undefinedTable(err) || oldLayout(err)) {
		if err = d.migrate(rctx, p); err == nil {
			err = f(rctx)
		}
	}
	return d.mapErr(ctx, rctx, op, err)
}

// checkMetadata refuses metadata that PostgreSQL text cannot hold.
func checkMetadata(meta string) error {
	if strings.IndexByte(meta, 0) >= 0 || !utf8.ValidString(meta) {
		return fmt.Errorf("%w: pglock: metadata must be UTF-8 without NUL bytes (PostgreSQL text)", driver.ErrInvalid)
	}
	return nil
}

// notHeld is the error of a call about a holding that is gone.
func notHeld(key string) error {
	return fmt.Errorf("%w: pglock: %q is not held by this owner", driver.ErrNotHeld, key)
}

var errNilDriver = fmt.Errorf("%w: pglock: nil driver", driver.ErrInvalid)

// Acquire's outcomes, as its statement reports them.
const (
	stateGranted   = 0
	stateBusy      = 1
	stateAbandoned = 2
)
