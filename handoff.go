package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// errDetached is the cause of a detached lease's end: it matches ErrReleased.
var errDetached = fmt.Errorf("%w: detached (the holding goes on in the store)", ErrReleased)

// Detach ends the lease here without releasing the lock: the renewal stops,
// Done is closed and Context is cancelled with a cause matching ErrReleased,
// and the holding stays in the store until its TTL runs out, unless a Resume
// of the returned reference takes it up first, in this process or another.
//
// The reference is a short printable string (driver.Ref: the backend and
// kind, the key, the owner, the fencing token, the TTL and lock-delay). It is a bearer
// credential for that one holding: whoever has it can extend, release and
// fence as the holder, and learns nothing else. Keep it as you would the
// lease. A reference resumed twice at once gives two leases of one owner, which
// both act as the holder (each renews, the first Unlock releases): hand it to
// one process.
//
// Detach returns ErrNotHeld for a lease that was unlocked or detached, the
// loss for a lost one, and an error matching errors.ErrUnsupported, changing
// nothing, when the Client's backend cannot resume a holding (it does not
// implement driver.Resumer).
func (l *Lease) Detach() (string, error) {
	if l.zero() {
		return "", ErrNotHeld
	}
	if _, ok := l.c.d.(driver.Resumer); !ok {
		return "", fmt.Errorf("dlock: the %s %s lock cannot resume a detached holding: %w", l.c.info.Backend, l.c.info.Kind, errors.ErrUnsupported)
	}
	l.expireIfPast()
	l.mu.Lock()
	switch l.state {
	case released:
		l.mu.Unlock()
		return "", fmt.Errorf("%w: already unlocked", ErrNotHeld)
	case lost:
		l.mu.Unlock()
		return "", context.Cause(l.ctx)
	}
	l.state = released
	r := driver.Ref{
		Backend: l.c.info.Backend, Kind: l.c.info.Kind, Key: l.key, Owner: l.owner, Token: l.token,
		TTL: l.ttl, Delay: l.delay, Fixed: l.renewEvery == 0,
	}
	l.cancel(errDetached) // the first cause stays: stopTimers' ErrReleased does not replace it
	l.mu.Unlock()
	l.stopTimers()
	if l.obs != nil {
		l.observeRelease(nil)
	}
	return r.String(), nil
}

// Resume takes up the holding that ref (from Lease.Detach, in this process or
// another) names, and returns a Lease of it: the same key, owner and fencing
// token, renewed, extended, released, fenced and told of a loss as any other.
// One owner-checked round trip checks that the holding is still there with
// that token and extends it to its TTL (the one it was taken with, or
// WithTTL's); it never takes a lock that is free.
//
// opts are the Client's per-call options (WithTTL, WithAutoRenew, WithMaxHold, WithObserver,
// WithDriftFactor...): a lease is renewed unless it was taken without renewal or
// WithAutoRenew(false) is given. A reference of a holding that was released,
// expired, forced or taken by another owner returns an error matching
// ErrNotHeld; a malformed, truncated or altered reference, or one of another
// backend or kind than the Client's, an error matching ErrInvalid; a Client
// whose backend cannot resume holdings, one matching errors.ErrUnsupported.
func (c *Client) Resume(ctx context.Context, ref string, opts ...Option) (*Lease, error) {
	if c == nil {
		return nil, invalidf("nil client")
	}
	if ctx == nil {
		return nil, invalidf("nil context")
	}
	r, err := driver.ParseRef(ref)
	if err != nil {
		return nil, err
	}
	rs, ok := c.d.(driver.Resumer)
	if !ok {
		return nil, fmt.Errorf("dlock: the %s %s lock cannot resume a detached holding: %w", c.info.Backend, c.info.Kind, errors.ErrUnsupported)
	}
	if r.Backend != c.info.Backend || r.Kind != c.info.Kind {
		return nil, invalidf("a reference to a %s %s lock, given to a Client of a %s %s lock", r.Backend, r.Kind, c.info.Backend, c.info.Kind)
	}
	cfg := c.base
	cfg.ttl, cfg.lockDelay = r.TTL, r.Delay
	if r.Fixed {
		cfg.apply([]Option{WithAutoRenew(false)})
	}
	cfg.apply(opts)
	if err := cfg.check(c.lim); err != nil {
		return nil, err
	}
	start := time.Now()
	g, err := rs.Resume(ctx, driver.Holding{Key: r.Key, Owner: r.Owner, TTL: cfg.ttl}, r.Token)
	if err != nil {
		return nil, err
	}
	if g.Token != r.Token {
		if sig, ok := g.Lost.(*driver.LossSignal); ok {
			sig.Unwatch()
		}
		return nil, fmt.Errorf("%w: the store holds %q with token %d, not the reference's %d", ErrNotHeld, r.Key, g.Token, r.Token)
	}
	return c.granted(r.Key, r.Owner, g, start, &cfg)
}
