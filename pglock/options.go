package pglock

import "time"

// Option configures a Driver (NewDriver, NewFairDriver, NewSemaphoreDriver).
// Without options a Driver locks in DefaultTable, bounds each request by
// DefaultRequestTimeout, creates nothing, and wakes waiters by LISTEN/NOTIFY.
type Option func(*options)

// options is what the Options of a Driver set.
type options struct {
	table          string
	requestTimeout time.Duration
	createTable    bool
	poll           bool
	unlogged       bool
}

// WithTable sets the table of the locks, optionally schema-qualified
// ("locks.dlock"); the default is DefaultTable. Names are letters, digits and
// '_', not starting with a digit, at most 57 bytes (the sequence appends
// "_token"). The NOTIFY channel has the same name; a Driver whose Lock waits
// also LISTENs on a channel of its own (see the package's Waiting).
func WithTable(name string) Option { return func(o *options) { o.table = name } }

// WithRequestTimeout bounds each single request (one statement, or a pool
// acquisition and one statement): a server that does not answer in time is
// dlock.ErrUnavailable, not a hang. The default is DefaultRequestTimeout; it
// must be positive.
func WithRequestTimeout(d time.Duration) Option { return func(o *options) { o.requestTimeout = d } }

// WithCreateTable makes the first call that finds a table it uses missing
// create it (see Driver.Migrate) and try again: a lock creates the locks'
// table and the token sequence, a fair lock the queue too, a semaphore its
// own table. Inspection (Inspect, List, ForceUnlock) and Sweep never create
// anything: without the table they return an error matching ErrNoTable.
func WithCreateTable() Option { return func(o *options) { o.createTable = true } }

// WithPolling disables LISTEN/NOTIFY: waiters poll, sleeping at most the
// holder's remaining TTL between attempts. Use it behind a pooler in
// transaction mode, which does not carry notifications.
func WithPolling() Option { return func(o *options) { o.poll = true } }

// WithUnlogged makes the tables that the Driver creates (Migrate, or
// WithCreateTable) UNLOGGED: their changes skip the write-ahead log, which
// makes every lock and unlock cheaper, but a crash of the database server
// (not a clean shutdown) empties them, and standbys do not have them. After
// such a crash every lock is free at once, whatever its TTL: holders that
// still run lose their mutual exclusion, though not their fencing (tokens come
// from a logged sequence and keep growing). A failover loses every lock
// likewise. See docs/safety.md. A table that exists already keeps its kind
// (ALTER TABLE ... SET UNLOGGED, or SET LOGGED, converts it).
func WithUnlogged() Option { return func(o *options) { o.unlogged = true } }
