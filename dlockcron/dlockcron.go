// Package dlockcron runs robfig/cron v3 jobs on several instances of a service
// with dlock deciding which instance runs each one: SkipIfLocked is a
// cron.JobWrapper that skips a run while the job's lock is held elsewhere (by
// another instance, or by a run of this one still going), the cluster-wide
// counterpart of cron.SkipIfStillRunning, on any dlock backend.
//
//	locker, _ := dlockcron.New(client) // client: any dlock Client, e.g. redislock.New(rdb)
//	skip, _ := locker.SkipIfLocked("hourly-report")
//	c := cron.New()
//	c.AddJob("@hourly", cron.NewChain(skip).Then(cron.FuncJob(report))) // one instance runs it
//
// Each run makes one TryLock of the job's key. The instance that takes it runs
// the job, renewing the lease while the job runs, and releases it at the end,
// or at the end of the min-hold (WithMinHold), so that instances whose clocks
// differ by a little do not run a fast job twice for the same tick.
//
// What it cannot do: robfig/cron's Job has no context, so a job whose lease is
// lost while it runs (the store unreachable past the TTL, a holder paused past
// its lease) goes on unless it implements ContextJob (ContextFunc) and watches
// the context it is given, which ends with the lease. A write that must never
// be made twice should carry the lease's fencing token to the store it changes
// (Lease). Ticks are not aligned across instances: each cron fires on its own
// clock, and the min-hold only covers a splay shorter than itself.
package dlockcron

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/jobhold"
	"github.com/robfig/cron/v3"
)

// ErrClosed is what a run after Close logs: the Locker no longer takes locks.
var ErrClosed = errors.New("dlockcron: closed")

// Option configures a Locker.
type Option func(*config)

type config struct {
	jobhold.Settings
	logger cron.Logger
}

// WithMinHold keeps each run's lock until at least d after it was taken, even
// when the job ends sooner, so that an instance whose clock runs behind by less
// than d skips the tick another instance ran. d must be shorter than the job's
// period minus the clock splay, or every instance skips the next tick too. The
// default is 0: the lock is released when the job returns.
func WithMinHold(d time.Duration) Option {
	return func(c *config) { c.SetMinHold(d) }
}

// WithLockOptions passes opts to every TryLock: dlock.WithTTL with
// dlock.WithAutoRenew(true) sets how long a dead instance keeps a job locked,
// dlock.WithMetadata names the instance. The default is the dlock.Locker's own
// defaults (for a dlock.Client without options, a 15s lease renewed while the
// job runs).
func WithLockOptions(opts ...dlock.Option) Option {
	return func(c *config) { c.Opts = append(c.Opts, opts...) }
}

// WithLogger sets where skipped runs (Info, "skip") and lock errors (Error) are
// logged, as cron's own wrappers take a cron.Logger. The default discards them.
func WithLogger(l cron.Logger) Option {
	return func(c *config) {
		if l == nil {
			c.Fail(fmt.Errorf("%w: nil logger", dlock.ErrInvalid))
			return
		}
		c.logger = l
	}
}

// Locker makes cron.JobWrappers that lock jobs through a dlock.Locker. Use one
// per cron instance, over a dlock.Locker of that instance's. It is safe for
// concurrent use.
type Locker struct {
	l     dlock.Locker
	cfg   config
	holds jobhold.Holds // the leases of running jobs, and those kept for their min-hold
}

// New returns a Locker over l. It returns an error matching dlock.ErrInvalid for
// a nil l or a bad option.
func New(l dlock.Locker, opts ...Option) (*Locker, error) {
	if driver.IsNil(l) {
		return nil, fmt.Errorf("%w: nil locker", dlock.ErrInvalid)
	}
	cfg := config{logger: cron.DiscardLogger}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.Err != nil {
		return nil, cfg.Err
	}
	return &Locker{l: l, cfg: cfg}, nil
}

// SkipIfLocked returns a cron.JobWrapper that runs the wrapped job only when it
// takes the lock key: while the key is held, by another instance or by a run
// of this one still going, the run is skipped. Put it last in a cron.Chain, so
// that it wraps the job itself and a ContextJob gets its context. It returns an
// error matching dlock.ErrInvalid for a key driver.ValidateKey refuses. A run
// whose TryLock fails for another reason (the store unreachable: an error
// matching dlock.ErrUnavailable) is skipped and logged.
func (l *Locker) SkipIfLocked(key string) (cron.JobWrapper, error) {
	if err := driver.ValidateKey(key); err != nil {
		return nil, err
	}
	return func(j cron.Job) cron.Job {
		return cron.FuncJob(func() { l.run(key, j) })
	}, nil
}

func (l *Locker) run(key string, j cron.Job) {
	if l.holds.Closed() {
		l.cfg.logger.Error(ErrClosed, "lock", "key", key)
		return
	}
	ctx := context.Background()
	lease, err := l.l.TryLock(ctx, key, l.cfg.Opts...)
	start := time.Now()
	if errors.Is(err, dlock.ErrNotObtained) {
		l.cfg.logger.Info("skip", "key", key)
		return
	}
	if err != nil {
		l.cfg.logger.Error(err, "lock", "key", key)
		return
	}
	if !l.holds.Track(key, lease) {
		_ = lease.Unlock(ctx)
		l.cfg.logger.Error(ErrClosed, "lock", "key", key)
		return
	}
	defer func() { // also when the job panics (cron.Recover may be outside)
		if err := l.holds.Release(ctx, key, lease, start, l.cfg.MinHold); err != nil {
			l.cfg.logger.Error(err, "unlock", "key", key)
		}
	}()
	if cj, ok := j.(ContextJob); ok {
		cj.RunContext(lease.Context())
		return
	}
	j.Run()
}

// Lease returns the lease of the job locked with key while it runs under this
// Locker, and nil otherwise. Its Token fences the job's writes.
func (l *Locker) Lease(key string) *dlock.Lease { return l.holds.Lease(key) }

// Close stops the Locker: later runs are skipped (and logged with ErrClosed),
// and Close waits until the locks kept for their min-hold have been released,
// or until ctx ends, when it releases them at once. Stop the cron first, and
// wait for its running jobs (the context cron.Stop returns).
func (l *Locker) Close(ctx context.Context) error { return l.holds.Close(ctx) }

// ContextJob is a cron.Job that can run under a context: SkipIfLocked calls
// RunContext instead of Run with a context that ends when the run's lease is
// lost (its cause is then dlock.ErrLockLost), so the job can stop instead of
// going on without its lock.
type ContextJob interface {
	cron.Job
	RunContext(ctx context.Context)
}

// ContextFunc is a ContextJob made of a function. Its Run, used when it is not
// wrapped by SkipIfLocked, passes context.Background().
type ContextFunc func(ctx context.Context)

// Run runs f with context.Background().
func (f ContextFunc) Run() { f(context.Background()) }

// RunContext runs f with ctx.
func (f ContextFunc) RunContext(ctx context.Context) { f(ctx) }
