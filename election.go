package dlock

import (
	"context"
	"time"
)

// Leadership is a won election: the holder of a role, returned by Campaign. It
// is a Lease under another name, with the same guarantees: leadership can be
// lost before Resign (Done is closed and Context cancelled with ErrLockLost
// strictly before another candidate can win, clock drift within the margin),
// and work that must never be done by two leaders passes Token to the resource
// it changes (fencing). Its methods are safe for concurrent use; those of a nil
// *Leadership report ErrNotHeld.
type Leadership struct {
	role  string
	lease *Lease
}

// Campaign waits until it wins the role for the caller and returns the
// leadership. It runs on any Locker: the role is the lock key, opts are the
// Lock options (WithTTL sets how long a dead leader keeps the role, the time
// another candidate then takes to win; WithMetadata names the candidate for
// Leader and Observe; WithWait bounds the campaign, and WithFailureLimit how
// long it waits through a failing backend). The leadership is renewed for as
// long as the leader lives, whatever its TTL: unlike a lock, a leadership with
// WithTTL is not a fixed lease, unless WithAutoRenew(false) is given (in opts
// or as the Client's default). Without options it is lost DefaultTTL after its
// leader dies. A candidate that loses its leadership campaigns again by
// calling Campaign again; RunAsLeader does that in a loop.
//
// It returns an error matching ErrInvalid for a nil locker or context or a bad
// role or option, and otherwise Lock's errors: the context's when it ended the
// campaign.
func Campaign(ctx context.Context, l Locker, role string, opts ...Option) (*Leadership, error) {
	if isNil(l) {
		return nil, invalidf("nil locker")
	}
	if ctx == nil {
		return nil, invalidf("nil context")
	}
	if err := ValidateKey(role); err != nil {
		return nil, err
	}
	lease, err := l.Lock(ctx, role, append([]Option{renewUnlessSet}, opts...)...)
	if err != nil {
		return nil, err
	}
	return &Leadership{role: role, lease: lease}, nil
}

// renewUnlessSet turns the watchdog on unless WithAutoRenew was given (as the
// Client's default, or later in the call's options, which override it).
func renewUnlessSet(c *config) {
	if c.autoRenew == 0 {
		c.autoRenew = 1
	}
}

// Role returns the role won.
func (l *Leadership) Role() string {
	if l == nil {
		return ""
	}
	return l.role
}

// Lease returns the lease that holds the role: its Extend, TTL and Deadline
// work as for any lock.
func (l *Leadership) Lease() *Lease {
	if l == nil {
		return nil
	}
	return l.lease
}

// Token returns the fencing token of this term: every later term of the role
// has a greater one.
func (l *Leadership) Token() uint64 { return l.Lease().Token() }

// Done returns a channel closed when the leadership ends: lost or resigned.
func (l *Leadership) Done() <-chan struct{} { return l.Lease().Done() }

// Context returns a context cancelled when the leadership ends, with cause
// ErrLockLost (lost) or ErrReleased (resigned). Run the leader's work under it.
func (l *Leadership) Context() context.Context { return l.Lease().Context() }

// Err returns nil while the caller leads, and otherwise why it stopped: an
// error matching ErrLockLost, or ErrReleased.
func (l *Leadership) Err() error { return l.Lease().Err() }

// Resign gives the role up, so that another candidate can win it at once. As
// Lease.Unlock, it returns an error matching ErrNotHeld when the leadership had
// ended already.
func (l *Leadership) Resign(ctx context.Context) error { return l.Lease().Unlock(ctx) }

// Leader tells who holds role now, as the Inspector reads it: Held is false
// when nobody leads; otherwise Owner is the leader's owner token (its
// WithOwner ID, if it gave one), Metadata its WithMetadata text (an instance
// name, say), Token its term's fencing token and TTL the time its leadership
// lasts unless renewed. It is a snapshot. Errors are Inspect's.
func Leader(ctx context.Context, in Inspector, role string) (LockInfo, error) {
	if isNil(in) {
		return LockInfo{}, invalidf("nil inspector")
	}
	if ctx == nil {
		return LockInfo{}, invalidf("nil context")
	}
	return in.Inspect(ctx, role)
}

// Observe bounds for the polling interval of Observe.
const (
	MinObserveInterval = time.Millisecond
	MaxObserveInterval = time.Minute
)

// Observe reports changes of role's leader: it reads the role with the
// Inspector at once and then every interval, and sends each read whose leader
// (Held, Owner or Token) differs from the last one sent, the first read
// included. It polls, on every backend: the interval bounds how late a change
// is seen. A read that fails is skipped (the next one may succeed), except the
// first, whose error Observe returns. The channel is closed when ctx ends; the
// caller must keep receiving until then or cancel ctx. interval must lie in
// [MinObserveInterval, MaxObserveInterval]; otherwise, and for a nil inspector
// or context or a bad role, the error matches ErrInvalid.
func Observe(ctx context.Context, in Inspector, role string, interval time.Duration) (<-chan LockInfo, error) {
	if interval < MinObserveInterval || interval > MaxObserveInterval {
		return nil, invalidf("observe interval %v outside [%v, %v]", interval, MinObserveInterval, MaxObserveInterval)
	}
	first, err := Leader(ctx, in, role)
	if err != nil {
		return nil, err
	}
	ch := make(chan LockInfo)
	go func() {
		defer close(ch)
		t := time.NewTicker(interval)
		defer t.Stop()
		cur, send := first, true
		for {
			if send {
				select {
				case ch <- cur:
				case <-ctx.Done():
					return
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			info, err := in.Inspect(ctx, role)
			send = err == nil && (info.Held != cur.Held || info.Owner != cur.Owner || info.Token != cur.Token)
			if send {
				cur = info
			}
		}
	}()
	return ch, nil
}
