package dlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
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
	// WithWait has passed, retrying meanwhile the backend failures that waiting
	// may cure, for at most the failure limit (WithFailureLimit) without a reply
	// saying the lock is held. When the lock was held to the end, the error
	// matches ErrNotObtained (and the context's error when that ended the wait);
	// when the backend was failing to the end, it matches ErrUnavailable instead,
	// since nobody may hold the lock.
	Lock(ctx context.Context, key string, opts ...Option) (*Lease, error)
}

// CleanupTimeout bounds the detached clean-up calls made after a cancelled or
// failed request (abandoning an acquisition whose outcome is unknown, an Unlock
// called with an expired context, the release after a lease was lost), by the
// Client and by drivers alike; see CleanupContext.
const CleanupTimeout = 2 * time.Second

// CleanupContext returns a context for a clean-up call that must run although
// ctx ended: it keeps ctx's values, not its cancellation, and ends after
// CleanupTimeout. Call cancel when the clean-up returns.
func CleanupContext(ctx context.Context) (cctx context.Context, cancel context.CancelFunc) {
	if ctx == nil {
		ctx = context.Background()
	}
	return context.WithTimeout(context.WithoutCancel(ctx), CleanupTimeout)
}

// Client runs the backend-neutral lock algorithm (validation, waiting, retry,
// fencing-token hand-out, renewal, loss notification) over a backend Driver. It is
// safe for concurrent use; create one per backend connection and share it.
type Client struct {
	d    Driver
	lim  TTLLimits
	base config
}

var _ Locker = (*Client)(nil)

// NewClient returns a Client over d, with opts as defaults for every call. It
// returns an error matching ErrInvalid for a nil driver, a driver whose TTLLimits
// make no sense, or a bad option.
func NewClient(d Driver, opts ...Option) (*Client, error) {
	if isNil(d) {
		return nil, invalidf("nil driver")
	}
	lim := DefaultTTLLimits
	if tl, ok := d.(TTLLimiter); ok {
		lim = tl.TTLLimits()
		if lim.Min <= 0 || lim.Max < lim.Min || lim.Step <= 0 {
			return nil, invalidf("driver TTL limits %+v", lim)
		}
	}
	c := &Client{d: d, lim: lim, base: defaultConfig()}
	if lim.Min > DefaultTTL/3 || lim.Max < DefaultTTL {
		// Keep the default usable: the shortest TTL that leaves room to renew.
		c.base.ttl = min(max(DefaultTTL, 3*lim.Min), lim.Max)
	}
	c.base.apply(opts)
	probe := c.base
	if err := probe.check(lim); err != nil {
		return nil, err
	}
	return c, nil
}

// Driver returns the backend driver the Client runs on.
func (c *Client) Driver() Driver { return c.d }

// TTLLimits returns the lease times the Client's backend can grant.
func (c *Client) TTLLimits() TTLLimits {
	if c == nil {
		return DefaultTTLLimits
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
	return cfg, ValidateKey(key)
}

// TryLock makes a single attempt to take key. See Locker.
func (c *Client) TryLock(ctx context.Context, key string, opts ...Option) (*Lease, error) {
	cfg, err := c.resolve(ctx, key, opts)
	if err != nil {
		return nil, err
	}
	return c.once(ctx, key, &cfg)
}

func (c *Client) once(ctx context.Context, key string, cfg *config) (*Lease, error) {
	a := &acquisition{c: c, key: key, cfg: cfg, owner: cfg.newOwner()}
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
	if err != nil {
		return nil, err
	}
	if cfg.waitSet && cfg.wait == 0 {
		return c.once(ctx, key, &cfg)
	}
	if cfg.waitSet {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.wait)
		defer cancel()
	}
	a := &acquisition{c: c, key: key, cfg: &cfg, owner: cfg.newOwner(), waiting: true}
	return a.wait(ctx)
}

// acquisition is one TryLock or Lock call: its attempts share one owner, so that
// an attempt whose reply was lost is found again by the next one (Acquire is
// idempotent for its owner), and a give-up can abandon them all.
type acquisition struct {
	c       *Client
	key     string
	cfg     *config
	owner   string
	waiting bool
	handle  any  // the last BusyError's Handle
	dirty   bool // an attempt may have left state behind: abandon on give-up
	start   time.Time
	tried   time.Time  // the start of the last attempt
	busy    *BusyError // the last attempt that found the lock held
	failed  error      // the last failure since then that the context did not cause
}

// attempt makes one acquisition attempt and wraps a success into a Lease.
func (a *acquisition) attempt(ctx context.Context) (*Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	start := time.Now()
	if a.start.IsZero() {
		a.start = start
	}
	a.tried = start
	g, err := a.c.d.Acquire(ctx, AcquireRequest{
		Key: a.key, Owner: a.owner, TTL: a.cfg.ttl, Metadata: a.cfg.metadata,
		Waiting: a.waiting, Handle: a.handle,
	})
	if err != nil {
		var busy *BusyError
		switch {
		case errors.As(err, &busy):
			if busy.Handle != nil {
				a.handle = busy.Handle
			}
			a.dirty = a.dirty || busy.Queued
		case errors.Is(err, ErrInvalid), errors.Is(err, ErrConflict), neverSent(err):
		default:
			a.dirty = true // no answer, or one we cannot read: it may have landed
		}
		return nil, err
	}
	ttl := g.TTL
	if ttl <= 0 {
		ttl = a.cfg.ttl
	}
	l := newLease(a.c, Holding{Key: a.key, Owner: a.owner, TTL: ttl, Handle: g.Handle}, g.Token, start, a.cfg)
	if !time.Now().Before(l.deadline) {
		// The reply came back too late for the lease to be of any use (F3). The
		// holding is ours: a retry takes it again with a fresh validity.
		a.dirty = true
		l.stopTimers()
		return nil, fmt.Errorf("%w: the lock was granted after its validity ran out (round trip %v, ttl %v)",
			ErrUnavailable, time.Since(start).Round(time.Millisecond), ttl)
	}
	l.start()
	if g.Lost != nil {
		l.watchLost(g.Lost)
	}
	return l, nil
}

// retryable reports whether waiting may cure err: the backend is unreachable,
// slow or said "not now", or the request's own timeout (not ctx) cut it short.
func retryable(ctx context.Context, err error) bool {
	if errors.Is(err, ErrRefused) {
		return false
	}
	if errors.Is(err, ErrUnavailable) {
		return true
	}
	return (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) && ended(ctx) == nil
}

// wait is Lock. With a Notifier, the waiter sleeps until it is woken, or until the
// driver's RetryAfter or the holder's remaining TTL (as the last attempt reported
// it) has passed: a lost notification costs at most that. The retry strategy
// counts attempts and sets the sleep when neither is known, when the driver cannot
// notify, and after a transient failure.
func (a *acquisition) wait(ctx context.Context) (l *Lease, err error) {
	defer func() {
		if err != nil {
			a.giveUp(ctx)
		}
	}()
	var wake <-chan struct{}
	subscribed := false
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var failing time.Time // the start of the first attempt of a run of failures
	logged := false
	for n := 1; ; n++ {
		l, err = a.attempt(ctx)
		if err == nil {
			return l, nil
		}
		if ended(ctx) != nil || cut(ctx, err) {
			return nil, a.final(ctx, err, n)
		}
		a.note(ctx, err)
		var busy *BusyError
		isBusy := errors.As(err, &busy)
		if !isBusy && !retryable(ctx, err) {
			return nil, err
		}
		var failLeft time.Duration // time left in the failure limit; 0 when busy
		if isBusy {
			failing = time.Time{}
		} else {
			if failing.IsZero() {
				failing = a.tried
			}
			failLeft = a.cfg.failLimit - time.Since(failing)
			if failLeft <= 0 {
				return nil, fmt.Errorf("%w; gave up after %v of failures (the failure limit)%s",
					err, time.Since(failing).Round(time.Millisecond), a.waited(n))
			}
			if !logged {
				logged = true
				a.cfg.log().Warn("dlock: waiting for a lock while the backend fails; retrying until it answers, for at most the failure limit",
					"key", a.key, "err", err, "failure_limit", a.cfg.failLimit)
			}
		}
		if isBusy && !subscribed {
			subscribed = true
			if nf, ok := a.c.d.(Notifier); ok {
				h := Holding{Key: a.key, Owner: a.owner, TTL: a.cfg.ttl, Handle: a.handle}
				if w, cancel, serr := nf.Subscribe(ctx, h); serr == nil {
					defer cancel()
					wake = w
				}
			}
		}
		delay := a.cfg.retry.Backoff(n)
		if delay < 0 {
			return nil, a.final(ctx, err, n)
		}
		if isBusy {
			switch {
			case wake != nil && busy.RetryAfter > 0:
				delay = busy.RetryAfter
			case busy.Remaining >= 0 && (wake != nil || delay > busy.Remaining+time.Millisecond):
				// Expiry has millisecond resolution: wake just after it.
				delay = busy.Remaining + time.Millisecond
			}
		} else if delay > failLeft {
			delay = failLeft // one last attempt at the limit
		}
		timer.Reset(delay)
		select {
		case <-ctx.Done():
			return nil, a.final(ctx, err, n)
		case _, ok := <-wake:
			if !ok {
				wake = nil // notifications stopped: poll
			}
		case <-timer.C:
		}
	}
}

// final is the error of an acquisition that gave up after n attempts, the last of
// which failed with last. It says, in one line, what the attempts met: the holder
// (a *BusyError, matching ErrNotObtained) or the backend's failure (matching
// ErrUnavailable, not ErrNotObtained: nobody may hold the lock), and matches the
// context's error when that ended the acquisition. An attempt cut short by the
// context's end tells nothing, and so the one before it speaks; when none does,
// the error matches ErrNotObtained.
func (a *acquisition) final(ctx context.Context, last error, n int) error {
	cerr := ended(ctx)
	if cerr == nil && cut(ctx, last) {
		cerr = context.DeadlineExceeded
	}
	if cerr == nil || errors.Is(last, ErrInvalid) || errors.Is(last, ErrConflict) || errors.Is(last, ErrRefused) {
		if errors.Is(last, ErrNotObtained) || !a.waiting {
			return last
		}
		return fmt.Errorf("%w; gave up%s", last, a.waited(n))
	}
	var busy *BusyError
	if !errors.As(last, &busy) {
		busy = nil
		if !errors.Is(last, context.Canceled) && !errors.Is(last, context.DeadlineExceeded) && !cut(ctx, last) && a.failed == nil && a.busy == nil {
			a.failed = last // the only attempt there was
		}
		if a.failed == nil {
			busy = a.busy
		}
	}
	switch {
	case busy != nil:
		return fmt.Errorf("%w%s: %w", busy, a.waited(n), cerr)
	case a.failed != nil:
		return fmt.Errorf("%w; gave up%s: %w", a.failed, a.waited(n), cerr)
	}
	return fmt.Errorf("%w%s: %w", ErrNotObtained, a.waited(n), cerr)
}

// note records the outcome of a failed attempt that the context did not cut short.
func (a *acquisition) note(ctx context.Context, err error) {
	var busy *BusyError
	switch {
	case errors.As(err, &busy):
		a.busy, a.failed = busy, nil
	case ended(ctx) == nil:
		a.failed = err
	}
}

func (a *acquisition) waited(n int) string {
	if !a.waiting {
		return ""
	}
	return fmt.Sprintf(" after waiting %v (%d attempts)", time.Since(a.start).Round(time.Millisecond), n)
}

// giveUp removes whatever the acquisition's attempts may have left in the store,
// on a detached, bounded context.
func (a *acquisition) giveUp(ctx context.Context) {
	if !a.dirty {
		return
	}
	cctx, cancel := CleanupContext(ctx)
	defer cancel()
	h := Holding{Key: a.key, Owner: a.owner, TTL: a.cfg.ttl, Handle: a.handle}
	if ab, ok := a.c.d.(Abandoner); ok {
		_ = ab.Abandon(cctx, h)
		return
	}
	_ = a.c.d.Release(cctx, h)
}

// cutSlack is how close to its context's deadline a network timeout must come to
// count as cut short by the deadline: clients compute socket deadlines from a
// coarse clock, so the timeout can fire a little before the context's.
const cutSlack = 100 * time.Millisecond

// cut reports whether err is a network timeout that the end of ctx's deadline
// explains.
func cut(ctx context.Context, err error) bool {
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) && !(errors.As(err, &ne) && ne.Timeout()) {
		return false
	}
	dl, ok := ctx.Deadline()
	return ok && time.Until(dl) < cutSlack
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
