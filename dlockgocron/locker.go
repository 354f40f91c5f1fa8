package dlockgocron

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/jobhold"
	"github.com/go-co-op/gocron/v2"
)

// ErrClosed is returned by Locker.Lock after Close, and by Elector.IsLeader
// after the Elector's Close.
var ErrClosed = errors.New("dlockgocron: closed")

// Option configures a Locker.
type Option func(*lockerConfig)

type lockerConfig struct {
	jobhold.Settings
	prefix string
}

// WithMinHold keeps each job's lock until at least d after it was taken, even
// when the job ends sooner: a scheduler whose clock runs behind by less than d
// then finds the lock still held when its own tick comes, and skips the run the
// first scheduler made. d must be shorter than the job's interval minus the
// clock splay, or every scheduler skips the next tick too. The default is 0: the
// lock is released as soon as the job returns.
func WithMinHold(d time.Duration) Option {
	return func(c *lockerConfig) { c.SetMinHold(d) }
}

// WithKeyPrefix puts prefix before every job name to make the lock key, so that
// several applications can share a store. The default is no prefix: the key is
// the job's name.
func WithKeyPrefix(prefix string) Option {
	return func(c *lockerConfig) { c.prefix = prefix }
}

// WithLockOptions passes opts to every TryLock, after the dlock.Locker's own
// defaults: dlock.WithTTL with dlock.WithAutoRenew(true) sets how long a dead
// instance keeps a job locked, dlock.WithMetadata names the instance for
// inspection. The default is the Locker's defaults (for a dlock.Client without
// options: a 15s lease renewed while the job runs).
func WithLockOptions(opts ...dlock.Option) Option {
	return func(c *lockerConfig) { c.Opts = append(c.Opts, opts...) }
}

// Locker is a gocron.Locker over a dlock.Locker: for each run of a job it makes
// one TryLock of the job's name (gocron passes the name given by
// gocron.WithName, or the function's name), so that among schedulers sharing the
// store one runs the job and the others skip it. The lease is renewed while the
// job runs (with the dlock.Locker's default renewal, or as WithLockOptions
// sets) and released when it returns, or at the end of the min-hold
// (WithMinHold). A Locker is safe for concurrent use; use one per scheduler, over
// a dlock.Locker per scheduler or shared.
//
// The job's lease can be lost while it runs (the store unreachable for longer
// than the TTL allows, a holder paused past its lease): gocron cannot stop a
// job, so wrap the job in Guard to have it run under a context that ends with
// the lease.
type Locker struct {
	l   dlock.Locker
	cfg lockerConfig

	holds jobhold.Holds // the leases of running jobs, and those kept for their min-hold
}

var _ gocron.Locker = (*Locker)(nil)

// NewLocker returns a Locker that locks jobs through l. It returns an error
// matching dlock.ErrInvalid for a nil l or a bad option.
func NewLocker(l dlock.Locker, opts ...Option) (*Locker, error) {
	if driver.IsNil(l) {
		return nil, fmt.Errorf("%w: nil locker", dlock.ErrInvalid)
	}
	var cfg lockerConfig
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

// Key returns the lock key of the job named name.
func (l *Locker) Key(name string) string { return l.cfg.prefix + name }

// Lock takes the lock of the job named key with a single TryLock. When another
// scheduler runs the job, the error matches dlock.ErrNotObtained and gocron skips
// the run; a key that is not a valid lock key (driver.ValidateKey) is an error
// matching dlock.ErrInvalid, and store failures match dlock.ErrUnavailable. After
// Close it returns ErrClosed.
func (l *Locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	if l.holds.Closed() {
		return nil, ErrClosed
	}
	lease, err := l.l.TryLock(ctx, l.Key(key), l.cfg.Opts...)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if !l.holds.Track(key, lease) {
		_ = lease.Unlock(ctx)
		return nil, ErrClosed
	}
	return &Lock{l: l, name: key, lease: lease, start: start}, nil
}

// Lease returns the lease of the job named name while it runs under this
// Locker, and nil otherwise. Its Token fences the job's writes; its Context
// ends when the lease is lost.
func (l *Locker) Lease(name string) *dlock.Lease { return l.holds.Lease(name) }

// Guard returns fn as a gocron task function for the job named name (pass it to
// gocron.NewTask, and name the job with gocron.WithName(name)): fn runs under a
// context that gocron's job context ends, and so does the loss of the job's
// lease, with cause dlock.ErrLockLost. When the lease was lost while fn ran, the
// returned error matches dlock.ErrLockLost even if fn succeeded. A job that
// does not watch its context cannot be stopped.
func (l *Locker) Guard(name string, fn func(ctx context.Context) error) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		lease := l.Lease(name)
		if lease == nil {
			return fn(ctx)
		}
		fctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		stop := context.AfterFunc(lease.Context(), func() { cancel(context.Cause(lease.Context())) })
		defer stop()
		err := fn(fctx)
		if lerr := lease.Err(); errors.Is(lerr, dlock.ErrLockLost) && !errors.Is(err, dlock.ErrLockLost) {
			err = errors.Join(err, lerr)
		}
		return err
	}
}

// Close stops the Locker: later Lock calls fail with ErrClosed, and Close waits
// until the locks still kept for their min-hold have been released, or until
// ctx ends, when it releases them at once. It does not touch the locks of jobs
// still running; gocron releases them when they return (shut the scheduler down
// first).
func (l *Locker) Close(ctx context.Context) error { return l.holds.Close(ctx) }

// Lock is the lock of one run of a job, as gocron holds it.
type Lock struct {
	l     *Locker
	name  string
	lease *dlock.Lease
	start time.Time
	once  sync.Once
}

var _ gocron.Lock = (*Lock)(nil)

// Lease returns the lease that holds the job's lock.
func (k *Lock) Lease() *dlock.Lease { return k.lease }

// Unlock ends the run's hold on the job: it releases the lease at once, or, with
// a min-hold that has not passed yet, keeps it renewed until the min-hold ends
// and releases it then (Unlock returns at once; after Close it releases at
// once). It returns an error matching
// dlock.ErrLockLost when the lease was lost while the job ran, and ErrNotHeld on
// a second call.
func (k *Lock) Unlock(ctx context.Context) error {
	err := fmt.Errorf("%w: already unlocked", dlock.ErrNotHeld)
	k.once.Do(func() { err = k.unlock(ctx) })
	return err
}

func (k *Lock) unlock(ctx context.Context) error {
	return k.l.holds.Release(ctx, k.name, k.lease, k.start, k.l.cfg.MinHold)
}
