package dlock

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/dlock-go/dlock/driver"
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
// CurrentLeader and WatchLeader; WithWait bounds the campaign, and WithFailureLimit how
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
	if driver.IsNil(l) {
		return nil, invalidf("nil locker")
	}
	if ctx == nil {
		return nil, invalidf("nil context")
	}
	if err := driver.ValidateKey(role); err != nil {
		return nil, err
	}
	lease, err := l.Lock(ctx, role, append([]Option{renewUnlessSet}, opts...)...)
	if err != nil {
		return nil, err
	}
	told := false
	defer lease.unlockUnless(&told)
	lease.observeLeader()
	told = true
	return &Leadership{role: role, lease: lease}, nil
}

// Backoff of RunAsLeader between two campaigns: a random time from half the
// floor up to a ceiling that doubles from runBackoffMin up to runBackoffMax with
// every round that follows a short one (a failed campaign, a term shorter than
// runBackoffMax).
const (
	runBackoffMin = 100 * time.Millisecond
	runBackoffMax = 10 * time.Second
)

var runBackoff = ExponentialBackoff(runBackoffMin, runBackoffMax)

// RunAsLeader runs fn whenever the caller leads role, until ctx ends: it
// campaigns (Campaign, with opts), runs fn under a context that is cancelled
// when the leadership ends (lost: the cause matches ErrLockLost) or ctx does,
// and resigns when fn returns, so that another candidate can win at once.
// Then, after a backoff (a random 50-100ms, its ceiling doubling up to 10s
// while terms stay shorter than that or campaigns fail), it campaigns again.
// fn should stop its work and return when its context ends;
// LeadershipFromContext gives it the term's Leadership (its fencing Token, for
// work that must never be done by two leaders). The leadership is renewed while
// fn runs; its TTL (WithTTL, DefaultTTL by default) is how long the role stays
// with a leader that died, before another candidate's fn starts.
//
// The loop goes on whatever fn returns: fn's error, a lost leadership and a
// failed campaign (a backend failing for longer than the failure limit, see
// WithFailureLimit) are logged with slog.Default (or WithLogger's logger), and
// the next campaign follows the backoff. Handle fn's errors inside fn to report
// them your own way. A panic in fn resigns and goes on up the stack, as in Do.
//
// RunAsLeader returns only when it cannot go on: ctx's error once ctx has
// ended (after fn has returned and the leadership was given up), or a
// campaign's error that waiting does not cure (ErrRefused, ErrConflict). It
// returns an error matching ErrInvalid, before any I/O, for a nil locker,
// function or context, a bad role or a bad option. It starts no goroutine of
// its own: fn runs on the caller's goroutine.
func RunAsLeader(ctx context.Context, l Locker, role string, fn func(ctx context.Context) error, opts ...Option) error {
	if err := checkRun(ctx, l, fn); err != nil {
		return err
	}
	if err := driver.ValidateKey(role); err != nil {
		return err
	}
	cfg := defaultConfig()
	cfg.apply(opts)
	if cfg.err != nil {
		return cfg.err
	}
	if cfg.logger == nil {
		if bl, ok := l.(baseLogger); ok {
			cfg.logger = bl.baseLogger()
		}
	}
	log := cfg.log()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for n := 1; ; n++ {
		lead, err := Campaign(ctx, l, role, opts...)
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return cerr
			}
			if errors.Is(err, ErrInvalid) || errors.Is(err, ErrConflict) || errors.Is(err, ErrRefused) {
				return err
			}
			if !errors.Is(err, ErrNotObtained) { // not a failure: WithWait ended
				log.Warn("dlock: campaign failed; campaigning again after a backoff", "role", role, "err", err)
			}
		} else if cerr := ctx.Err(); cerr != nil {
			// Won as ctx ended: no term, the role is given up at once.
			_ = lead.Resign(ctx)
			return cerr
		} else {
			start := time.Now()
			ferr, rerr := lead.run(ctx, fn)
			lerr := lead.Err()
			if cerr := ctx.Err(); cerr != nil {
				return cerr
			}
			switch {
			case errors.Is(lerr, ErrLockLost):
				log.Warn("dlock: leadership lost; campaigning again after a backoff", "role", role, "token", lead.Token(), "err", lerr)
			case ferr != nil:
				log.Warn("dlock: the leader's function failed; resigned, campaigning again after a backoff", "role", role, "token", lead.Token(), "err", ferr)
			}
			if rerr != nil && !errors.Is(rerr, ErrNotHeld) {
				log.Warn("dlock: resigning failed; the role is free at its TTL", "role", role, "token", lead.Token(), "err", rerr)
			}
			if time.Since(start) >= runBackoffMax {
				n = 1 // a long term: start the backoff over
			}
		}
		timer.Reset(runBackoff.Backoff(n))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
		}
	}
}

// run runs fn for the term and resigns when it returns, also when it panics or
// ends its goroutine; rerr is Resign's error.
func (l *Leadership) run(ctx context.Context, fn func(ctx context.Context) error) (ferr, rerr error) {
	return runHeld(context.WithValue(ctx, leadershipKey{}, l), l.lease, fn)
}

// baseLogger is implemented by *Client (and the clients that embed it): the
// logger given to NewClient, nil without one.
type baseLogger interface{ baseLogger() *slog.Logger }

func (c *Client) baseLogger() *slog.Logger { return c.base.logger }

type leadershipKey struct{}

// LeadershipFromContext returns the Leadership under which RunAsLeader runs
// the function that got ctx (or a context derived from it), or nil for any
// other context.
func LeadershipFromContext(ctx context.Context) *Leadership {
	if ctx == nil {
		return nil
	}
	l, _ := ctx.Value(leadershipKey{}).(*Leadership)
	return l
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

// CurrentLeader tells who holds role now, as the Inspector reads it: Held is false
// when nobody leads; otherwise Owner is the leader's owner token (its
// WithOwner ID, if it gave one), Metadata its WithMetadata text (an instance
// name, say), Token its term's fencing token and TTL the time its leadership
// lasts unless renewed. It is a snapshot. Errors are Inspect's.
func CurrentLeader(ctx context.Context, in driver.Inspector, role string) (LockInfo, error) {
	if driver.IsNil(in) {
		return LockInfo{}, invalidf("nil inspector")
	}
	if ctx == nil {
		return LockInfo{}, invalidf("nil context")
	}
	return in.Inspect(ctx, role)
}

// The bounds of WatchLeader's polling interval.
const (
	minWatchInterval = time.Millisecond
	maxWatchInterval = time.Minute
)

// WatchLeader reports changes of role's leader: it reads the role with the
// Inspector at once and sends each later read whose leader (Held, Owner or
// Token) differs from the last one sent, the first read included. Where the
// Inspector is a KeyWatcher whose backend can watch (etcd, ZooKeeper), it reads
// the role again as soon as the store reports a change, and every interval
// besides; otherwise (Redis, Redlock, PostgreSQL) it polls every interval,
// which then bounds how late a change is seen. A watch that fails falls back
// to polling. A read that fails is skipped (the next one may succeed), except
// the first, whose error WatchLeader returns. The channel is closed when ctx ends;
// the caller must keep receiving until then or cancel ctx. interval must lie
// in [1ms, 1min]; otherwise, and for a nil
// inspector or context or a bad role, the error matches ErrInvalid.
func WatchLeader(ctx context.Context, in driver.Inspector, role string, interval time.Duration) (<-chan LockInfo, error) {
	if interval < minWatchInterval || interval > maxWatchInterval {
		return nil, invalidf("watch interval %v outside [%v, %v]", interval, minWatchInterval, maxWatchInterval)
	}
	var changed <-chan struct{}
	var stopWatch context.CancelFunc = func() {}
	if kw, ok := in.(driver.KeyWatcher); ok && ctx != nil && !driver.IsNil(in) {
		// Watching first, so that no change after the first read is missed.
		wctx, cancel := context.WithCancel(ctx)
		if ch, err := kw.WatchKey(wctx, role); err == nil {
			changed, stopWatch = ch, cancel
		} else {
			cancel()
		}
	}
	first, err := CurrentLeader(ctx, in, role)
	if err != nil {
		stopWatch()
		return nil, err
	}
	ch := make(chan LockInfo)
	go func() {
		defer close(ch)
		defer stopWatch()
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
			case _, ok := <-changed:
				if !ok {
					changed, send = nil, false // the watch ended: poll
					continue
				}
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
