package natslock

import "time"

// Option configures a Driver (NewDriver). Without options a Driver locks in
// DefaultBucket, bounds each request by DefaultRequestTimeout, and refuses a
// bucket whose writes a restart of the server can lose (see ErrNotDurable).
type Option func(*options)

// options is what the Options of a Driver set.
type options struct {
	bucket         string
	requestTimeout time.Duration
	replicas       int
	volatile       bool
}

// WithBucket sets the key-value bucket of the locks; the default is
// DefaultBucket. Names are 1 to 64 letters, digits, '-' and '_'.
func WithBucket(name string) Option { return func(o *options) { o.bucket = name } }

// WithRequestTimeout bounds each single request: a server that does not
// answer in time is dlock.ErrUnavailable, not a hang. The default is
// DefaultRequestTimeout; it must be positive.
func WithRequestTimeout(d time.Duration) Option { return func(o *options) { o.requestTimeout = d } }

// WithReplicas sets the replicas of the bucket that Driver.Migrate creates
// (1 to 5); the default is 1, a single server's. Three replicas keep the
// locks and their tokens through the loss of one server: see docs/safety.md.
func WithReplicas(n int) Option { return func(o *options) { o.replicas = n } }

// WithVolatile accepts a bucket in memory storage or whose stream persists
// its writes asynchronously (PersistMode async), which a Driver refuses
// otherwise (ErrNotDurable): a restart of the server then forgets the
// locks, and fencing tokens start again from lower numbers. For tests and
// locks whose fencing does not matter.
func WithVolatile() Option { return func(o *options) { o.volatile = true } }
