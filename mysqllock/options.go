package mysqllock

import "time"

// Option configures a Driver (NewDriver, NewFairDriver, NewSemaphoreDriver).
// Without options a Driver locks in DefaultTable, bounds each request by
// DefaultRequestTimeout, creates nothing, and wakes waiters through a
// connection of its own (see the package's Waiting).
type Option func(*options)

// options is what the Options of a Driver set.
type options struct {
	table          string
	requestTimeout time.Duration
	createTable    bool
	poll           bool
}

// WithTable sets the table of the locks, optionally qualified by its database
// ("locks.dlock"); the default is DefaultTable. Names are letters, digits and
// '_', not starting with a digit, at most 59 bytes (the semaphores', the
// latches' and the fair locks' queue's tables append "_sem", "_sync" and
// "_fair").
func WithTable(name string) Option { return func(o *options) { o.table = name } }

// WithRequestTimeout bounds each single request (one statement, or one
// transaction of a few): a server that does not answer in time is
// dlock.ErrUnavailable, not a hang. The default is DefaultRequestTimeout; it
// must be positive.
func WithRequestTimeout(d time.Duration) Option { return func(o *options) { o.requestTimeout = d } }

// WithCreateTable makes the first call that finds a table it uses missing
// create the Driver's tables (see Driver.Migrate) and try again. Inspection
// (Inspect, List, ForceUnlock) never creates anything: without the table it
// returns an error matching ErrNoTable.
func WithCreateTable() Option { return func(o *options) { o.createTable = true } }

// WithPolling makes waiters poll, sleeping at most the holder's remaining TTL
// between attempts, and keeps no connection of the pool for wake-ups: for a
// proxy that does not carry KILL QUERY to the right server, or a server whose
// users may not kill one another's queries.
func WithPolling() Option { return func(o *options) { o.poll = true } }
