package dlock

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlock-go/dlock/driver"
)

// Locker is what users of every backend touch: a one-shot TryLock and a blocking
// Lock, both returning a held Lease. *Client implements it, and so does every
// primitive that hands out exclusive leases.
type Locker interface {
	// TryLock makes a single attempt. When another owner holds the lock it returns
	// an error matching ErrNotObtained (a *BusyError) at once.
	TryLock(ctx context.Context, key string, opts ...Option) (*Lease, error)

	// Lock waits until the lock is obtained, the context ends, or the wait given by
	// WithWait has passed, retrying meanwhile the backend failures that waiting
	// may cure, for at most the failure limit (WithFailureLimit) without a reply
	// saying the lock is held. When the lock was held to the end, the error
	// matches ErrNotObtained (and the context's error when that ended the wait);
	// when the backend was failing to the end, it matches ErrUnavailable instead,
	// since nobody may hold the lock.
	Lock(ctx context.Context, key string, opts ...Option) (*Lease, error)
}

// Client runs the backend-neutral lock algorithm (validation, waiting, retry,
// fencing-token hand-out, renewal, loss notification) over a backend Driver. It is
// safe for concurrent use; create one per backend connection and share it.
type Client struct {
	d    driver.Driver
	info driver.DriverInfo // d.Info(), as the Observer's events name it
	lim  driver.TTLLimits
	base config
	rn   *renewer // renews the Client's renewing leases, from one goroutine
}

var _ Locker = (*Client)(nil)

// NewClient returns a Client over d, with opts as defaults for every call. It
// returns an error matching ErrInvalid for a nil driver, a driver whose TTLLimits
// make no sense or whose Info names are malformed, or a bad option.
func NewClient(d driver.Driver, opts ...Option) (*Client, error) {
	if driver.IsNil(d) {
		return nil, invalidf("nil driver")
	}
	info := d.Info()
	if err := info.Check(); err != nil {
		return nil, err
	}
	lim := driver.DefaultTTLLimits
	if tl, ok := d.(driver.TTLLimiter); ok {
		lim = tl.TTLLimits()
		if lim.Min <= 0 || lim.Max < lim.Min || lim.Step <= 0 {
			return nil, invalidf("driver TTL limits %+v", lim)
		}
	}
	c := &Client{d: d, info: info, lim: lim, base: defaultConfig()}
	c.rn = newRenewer(c)
	if lim.Min > DefaultTTL/3 || lim.Max < DefaultTTL {
		// Keep the default usable: the shortest TTL that leaves room to renew.
		c.base.ttl = min(max(DefaultTTL, 3*lim.Min), lim.Max)
	}
	c.base.apply(opts)
	probe := c.base
	if err := probe.check(lim); err != nil {
		return nil, err
	}
	if err := c.checkDelay(&probe); err != nil {
		return nil, err
	}
	return c, nil
}

// checkDelay refuses a lock-delay that the Client's driver cannot keep.
func (c *Client) checkDelay(cfg *config) error {
	if cfg.lockDelay == 0 {
		return nil
	}
	ld, ok := c.d.(driver.LockDelayer)
	if !ok {
		return fmt.Errorf("dlock: the %s %s lock cannot keep a lock-delay: %w", c.info.Backend, c.info.Kind, errors.ErrUnsupported)
	}
	if m := ld.MaxLockDelay(); cfg.lockDelay > m {
		return invalidf("lock-delay %v above the backend's maximum %v", cfg.lockDelay, m)
	}
	return nil
}

// Driver returns the backend driver the Client runs on.
func (c *Client) Driver() driver.Driver { return c.d }

// TTLLimits returns the lease times the Client's backend can grant.
func (c *Client) TTLLimits() driver.TTLLimits {
	if c == nil {
		return driver.DefaultTTLLimits
	}
	return c.lim
}

func (c *Client) resolve(ctx context.Context, key string, opts []Option) (config, error) {
	if c == nil {
		return config{}, invalidf("nil client")
	}
	if ctx == nil {
		return config{}, invalidf("nil context")
	}
	cfg := c.base
	cfg.apply(opts)
	if err := cfg.check(c.lim); err != nil {
		return cfg, err
	}
	if err := c.checkDelay(&cfg); err != nil {
		return cfg, err
	}
	return cfg, driver.ValidateKey(key)
}

// TryLock makes a single attempt to take key. See Locker.
func (c *Client) TryLock(ctx context.Context, key string, opts ...Option) (*Lease, error) {
	cfg, err := c.resolve(ctx, key, opts)
	if cfg.observer != nil {
		return c.observed(ctx, key, &cfg, false, err)
	}
	if err != nil {
		return nil, err
	}
	return c.once(ctx, key, &cfg, nil)
}

func (c *Client) once(ctx context.Context, key string, cfg *config, ob *observing) (*Lease, error) {
	a := &acquisition{c: c, key: key, cfg: cfg, owner: cfg.newOwner(), ob: ob}
	l, err := a.attempt(ctx)
	if err != nil {
		a.giveUp(ctx)
		return nil, a.final(ctx, err, 1)
	}
	return l, nil
}

// Lock takes key, waiting while another owner holds it. Waiters are woken by
// the backend's notifications where it has them, and otherwise retry with the
// configured backoff; a waiter never sleeps past the holder's remaining TTL as
// last reported by a backend whose notifications may be lost. Failures that
// waiting may cure (ErrUnavailable: the server is down, slow, out of memory,
// read-only...) are retried with backoff until the wait ends; the error then
// says what the last attempt met. A wait with neither a context deadline nor
// WithWait still ends on a backend that only fails: after the failure limit
// (WithFailureLimit, DefaultFailureLimit = 1 minute by default) of failures
// with no reply saying the lock is held, Lock returns the last failure
// (matching ErrUnavailable). The first failure of a wait is logged once
// (slog.Default, or WithLogger's logger), so that a wait through an outage is
// not silent. See Locker.
func (c *Client) Lock(ctx context.Context, key string, opts ...Option) (*Lease, error) {
	cfg, err := c.resolve(ctx, key, opts)
	if cfg.observer != nil {
		return c.observed(ctx, key, &cfg, true, err)
	}
	if err != nil {
		return nil, err
	}
	return c.lock(ctx, key, &cfg, nil)
}

// lock is Lock once the options are resolved; ob is nil without an Observer.
func (c *Client) lock(ctx context.Context, key string, cfg *config, ob *observing) (*Lease, error) {
	if cfg.waitSet && cfg.wait == 0 {
		return c.once(ctx, key, cfg, ob)
	}
	if cfg.waitSet {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.wait)
		defer cancel()
	}
	a := &acquisition{c: c, key: key, cfg: cfg, owner: cfg.newOwner(), waiting: true, ob: ob}
	return a.wait(ctx)
}
