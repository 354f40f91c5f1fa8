package etcdlock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/driver"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock"
)

// DefaultRequestTimeout bounds each call of a Driver (one acquisition attempt,
// one extend, release, TTL or abandon) unless WithRequestTimeout says otherwise.
const DefaultRequestTimeout = 5 * time.Second

// Client is the dlock.Client an etcdlock constructor returns: a dlock.Locker on
// etcd, and a driver.Inspector through its Driver. It is safe for concurrent use.
type Client = dlock.Client

// New returns a Client that locks through cli, with the default request
// timeout (NewClient takes a Driver made with options). opts become the
// defaults of every TryLock and Lock; TTLs are whole seconds, at least one (see
// Driver.TTLLimits), and the default TTL is dlock.DefaultTTL. It returns an
// error matching dlock.ErrInvalid for a nil client or a bad option; it does no
// I/O.
func New(cli *clientv3.Client, opts ...dlock.Option) (*dlock.Client, error) {
	d, err := NewDriver(cli)
	if err != nil {
		return nil, err
	}
	return NewClient(d, opts...)
}

// NewClient returns a Client over d, with opts as the defaults of every TryLock
// and Lock. It returns an error matching dlock.ErrInvalid for a nil driver or a
// bad option.
func NewClient(d *Driver, opts ...dlock.Option) (*dlock.Client, error) {
	if d == nil {
		return nil, fmt.Errorf("%w: nil etcdlock driver", driver.ErrInvalid)
	}
	return dlock.NewClient(d, opts...)
}

// Driver is the etcd implementation of dlock's backend contract: single attempts
// of acquire, extend, release and TTL, plus wake-ups for waiters, abandonment of
// a waiter's entry, and inspection. Most users want New instead.
type Driver struct {
	cli     *clientv3.Client
	timeout time.Duration // per call
	wakes   atomic.Int64  // wake-ups sent to waiters, for tests

	mu     sync.Mutex
	leases map[int64]*sharedLease // by TTL class in seconds

	lw lossWatch // the holdings watched for deletion (loss.go)
}

var (
	_ driver.Driver     = (*Driver)(nil)
	_ driver.TTLLimiter = (*Driver)(nil)
	_ driver.Notifier   = (*Driver)(nil)
	_ driver.Abandoner  = (*Driver)(nil)
	_ driver.Inspector  = (*Driver)(nil)
)

// Option configures a Driver (NewDriver).
type Option func(*options)

// options is what the Options of a Driver set.
type options struct {
	timeout time.Duration // per call
}

// WithRequestTimeout bounds each call of the Driver: one acquisition attempt
// (TryLock is one), one extend, release, TTL or abandon, each of which takes a
// few round trips. A call that etcd has not answered by then, because the
// cluster is down, hung, cut off or has no leader, fails with an error matching
// dlock.ErrUnavailable, whatever the caller's context allows (without a bound,
// etcd's client waits for a connection for as long as the context lets it).
// The caller's context still ends a call sooner. A TryLock that meets such a
// cluster returns after the timeout plus its clean-up (at most the shorter of
// the timeout and 2s). The default is DefaultRequestTimeout (5s); d must be
// positive. Keep it well below the TTLs used: a renewal that takes longer than
// the lease's remaining validity cannot save it anyway.
func WithRequestTimeout(d time.Duration) Option {
	return func(o *options) { o.timeout = d }
}

// NewDriver returns the etcd driver over cli. It returns an error matching
// dlock.ErrInvalid for a nil client or a bad option; it does no I/O.
func NewDriver(cli *clientv3.Client, opts ...Option) (*Driver, error) {
	if cli == nil {
		return nil, fmt.Errorf("%w: nil etcd client", driver.ErrInvalid)
	}
	o := options{timeout: DefaultRequestTimeout}
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: etcdlock: nil option", driver.ErrInvalid)
		}
		opt(&o)
	}
	if o.timeout <= 0 {
		return nil, fmt.Errorf("%w: etcdlock: request timeout %v must be positive", driver.ErrInvalid, o.timeout)
	}
	return &Driver{cli: cli, timeout: o.timeout}, nil
}

// RequestTimeout returns the bound of each call (see WithRequestTimeout).
func (d *Driver) RequestTimeout() time.Duration { return d.timeout }

// request bounds one call of the Driver by the request timeout: a call cut
// short by it (not by the caller's context) is etcd not answering,
// dlock.ErrUnavailable. The call passes its error through done.
func (d *Driver) request(ctx context.Context) (context.Context, func(error) error) {
	return driver.BoundCall(ctx, d.timeout, "etcd")
}

// TTLLimits returns the lease times etcd can grant: whole seconds, at least one.
// The server may grant more than asked (its minimum TTL); the granted TTL is
// reported in every Grant and Extend.
func (d *Driver) TTLLimits() driver.TTLLimits {
	return driver.TTLLimits{Min: time.Second, Max: driver.MaxTTL, Step: time.Second}
}
