package dlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"reflect"
	"time"
)

// Locker is what users of every backend touch: a one-shot TryLock and a blocking
// Lock, both returning a held Lease. *Client implements it, and so does every
// primitive that hands out exclusive leases.
type Locker interface {
	// TryLock makes a single attempt. When another owner holds the lock it returns
	// an error matching ErrNotObtained (a *BusyError) at once.
	TryLock(ctx context.Context, key string, opts ...Option) (*Lease, error)

	// Lock waits until the lock is obtained, the context ends, or the wait given by
	// WithWait has passed. It returns an error matching ErrNotObtained (joined with
	// the context's error when that ended the wait) if the lock was not obtained.
	Lock(ctx context.Context, key string, opts ...Option) (*Lease, error)
}

// cleanupTimeout bounds the detached clean-up calls made after a cancelled or
// failed request (releasing an acquisition whose outcome is unknown, an Unlock
// called with an expired context).
const cleanupTimeout = 2 * time.Second

// Client runs the backend-neutral lock algorithm (validation, waiting, retry,
// fencing-token hand-out, renewal, loss notification) over a backend Driver. It is
// safe for concurrent use; create one per backend connection and share it.
type Client struct {
	d    Driver
	base config
}

var _ Locker = (*Client)(nil)

// NewClient returns a Client over d, with opts as defaults for every call. It
// returns an error matching ErrInvalid for a nil driver or a bad option.
func NewClient(d Driver, opts ...Option) (*Client, error) {
	if isNil(d) {
		return nil, invalidf("nil driver")
	}
	c := &Client{d: d, base: defaultConfig()}
	c.base.apply(opts)
	probe := c.base
	if err := probe.check(); err != nil {
		return nil, err
	}
	return c, nil
}

// Driver returns the backend driver the Client runs on.
func (c *Client) Driver() Driver { return c.d }

func (c *Client) resolve(ctx context.Context, key string, opts []Option) (config, error) {
	if c == nil {
		return config{}, invalidf("nil client")
	}
	if ctx == nil {
		return config{}, invalidf("nil context")
	}
	cfg := c.base
	cfg.apply(opts)
	if err := cfg.check(); err != nil {
		return cfg, err
	}
	return cfg, ValidateKey(key)
}

// TryLock makes a single attempt to take key. See Locker.
func (c *Client) TryLock(ctx context.Context, key string, opts ...Option) (*Lease, error) {
	cfg, err := c.resolve(ctx, key, opts)
	if err != nil {
		return nil, err
	}
	return c.attempt(ctx, key, &cfg, "", false)
}

// Lock takes key, waiting while another owner holds it. Waiters are woken by the
// backend's notifications where it has them, and otherwise retry with the
// configured backoff; a waiter never sleeps past the holder's remaining TTL as
// last reported by the server. See Locker.
func (c *Client) Lock(ctx context.Context, key string, opts ...Option) (*Lease, error) {
	cfg, err := c.resolve(ctx, key, opts)
	if err != nil {
		return nil, err
	}
	if cfg.waitSet && cfg.wait == 0 {
		return c.attempt(ctx, key, &cfg, "", false)
	}
	// A fresh owner per attempt, unless the driver keeps per-waiter state (a queue
	// position, a notification registration): then one owner for the whole call.
	owner := ""
	_, abandons := c.d.(Abandoner)
	_, notifies := c.d.(Notifier)
	if abandons || notifies {
		owner = newOwner()
	}
	l, err := c.attempt(ctx, key, &cfg, owner, true)
	var busy *BusyError
	if err == nil || !errors.As(err, &busy) {
		return l, err
	}
	return c.wait(ctx, key, &cfg, busy, owner)
}

// wait is Lock after a failed first attempt. With a Notifier, the waiter sleeps
// until it is woken or until the holder's remaining TTL (as the last attempt
// reported it) has passed, whichever comes first: a lost notification costs at
// most that. The retry strategy then only counts attempts, and sets the sleep
// when the remaining TTL is unknown or the driver cannot notify.
func (c *Client) wait(ctx context.Context, key string, cfg *config, busy *BusyError, owner string) (l *Lease, err error) {
	if cfg.waitSet {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.wait)
		defer cancel()
	}
	if a, ok := c.d.(Abandoner); ok {
		defer func() {
			if err != nil {
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
				_ = a.Abandon(cctx, key, owner)
				cancel()
			}
		}()
	}
	var wake <-chan struct{}
	if n, ok := c.d.(Notifier); ok {
		w, cancel, err := n.Subscribe(ctx, key, owner)
		if err == nil {
			defer cancel()
			wake = w
		}
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for n := 1; ; n++ {
		delay := cfg.retry.Backoff(n)
		if delay < 0 {
			return nil, busy
		}
		if busy.Remaining >= 0 && (wake != nil || delay > busy.Remaining+time.Millisecond) {
			// Expiry has millisecond resolution: wake just after it.
			delay = busy.Remaining + time.Millisecond
		}
		timer.Reset(delay)
		select {
		case <-ctx.Done():
			return nil, errors.Join(ErrNotObtained, ctx.Err())
		case <-wake:
		case <-timer.C:
		}
		l, err = c.attempt(ctx, key, cfg, owner, true)
		if err == nil || !errors.As(err, &busy) {
			return l, err
		}
	}
}

// attempt makes one acquisition attempt and wraps a success into a Lease. An
// attempt whose outcome is unknown (cancelled or failed in flight) is cleaned up
// with a release on a detached context before the error is returned.
func (c *Client) attempt(ctx context.Context, key string, cfg *config, owner string, waiting bool) (*Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, errors.Join(ErrNotObtained, err)
	}
	if owner == "" {
		owner = newOwner()
	}
	start := time.Now()
	token, err := c.d.Acquire(ctx, AcquireRequest{Key: key, Owner: owner, TTL: cfg.ttl, Metadata: cfg.metadata, Waiting: waiting})
	if err != nil {
		var busy *BusyError
		if errors.As(err, &busy) || errors.Is(err, ErrInvalid) || errors.Is(err, ErrConflict) {
			return nil, err
		}
		if !neverSent(err) {
			c.cleanup(ctx, key, owner)
		}
		if cerr := ended(ctx); cerr != nil && !errors.Is(err, ErrNotObtained) {
			if !errors.Is(err, cerr) {
				err = errors.Join(err, cerr)
			}
			err = errors.Join(ErrNotObtained, err)
		}
		return nil, err
	}
	l := newLease(c.d, key, owner, token, start, cfg)
	if !time.Now().Before(l.deadline) {
		// The reply came back too late for the lease to be of any use (F3).
		c.cleanup(ctx, key, owner)
		l.stopTimers()
		return nil, fmt.Errorf("%w: acquired after its validity ran out (round trip %v, ttl %v)",
			ErrNotObtained, time.Since(start), cfg.ttl)
	}
	l.start(cfg)
	return l, nil
}

// ended returns ctx's error, or context.DeadlineExceeded once its deadline has
// passed: a network read cut short by the deadline can return before the
// context's own timer has fired.
func ended(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

func (c *Client) cleanup(ctx context.Context, key, owner string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	_ = c.d.Release(cctx, key, owner)
}

// neverSent reports whether err shows that the request never left this process
// (the connection could not even be dialled), so there is nothing to clean up.
func neverSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// newOwner returns a fresh owner token: 128 random bits, hex encoded.
func newOwner() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// isNil reports whether v is nil or an interface holding a nil pointer, map,
// channel, function or slice.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Chan, reflect.Func, reflect.Slice, reflect.Interface:
		return rv.IsNil()
	}
	return false
}

// IsNil reports whether v is nil or an interface value holding a nil pointer (or
// other nil reference). Backends use it to reject typed-nil clients with ErrInvalid
// instead of panicking later.
func IsNil(v any) bool { return isNil(v) }
