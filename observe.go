package dlock

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// Observer is told of every lifecycle event of the locks a Client takes: the
// start and end of each acquisition, each renewal, the loss or release of each
// lease, the abandon of a given-up acquisition, the wake-ups a waiter receives,
// and leadership gained and lost. Metrics, traces and logs hang on it (see the
// dlockotel module).
//
// Its methods run on the goroutine of the event (the caller's, the Client's
// renewer, which tells a round's renewals one after another, or a lease's
// timers): they must be fast, must not block, must not call the lease's or
// Client's operations (Unlock, Extend, TryLock...; reading Key and Token is
// fine), and must be safe for concurrent use. dlock does not guard against a
// slow Observer: one that blocks delays the acquisition, or the renewals that
// keep leases alive; Unlock waits for a Renewal being told of its lease only
// until Unlock's context ends. Without an Observer (the default) no event is
// built and nothing is called.
//
// A hook that panics leaves no lock held. The panic goes on up the goroutine of
// the event, after dlock has undone what the caller will never see: a lease
// whose AcquireEnd (or, in Campaign, whose Term) panicked is unlocked
// (its Release is told, and renewal stops), with the keys LockAll took before
// it, an acquisition whose Wake or Abandon panicked is abandoned, and the
// release that follows a Loss runs. On the caller's goroutine a recovering
// caller (net/http's server does) goes on with the lock free. On dlock's own
// goroutines (the renewer, a lease's timers) nothing recovers and the program
// ends, as with any unrecovered panic; a lease whose Renewal panicked is
// released first, and the others end at their TTL.
//
// Embed NopObserver to implement only the methods of interest: methods added to
// Observer later will come with a no-op in NopObserver.
type Observer interface {
	// AcquireStart is called when a TryLock or Lock begins, before any
	// attempt. The returned context (ctx itself, or one derived from it, for
	// example carrying a span) is the one AcquireEnd is given.
	AcquireStart(ctx context.Context, e AcquireStartEvent) context.Context
	// AcquireEnd is called once per AcquireStart, when the acquisition
	// returns. When it returned a lease, the returned context is the one the
	// lease's later events (Renewal, Loss, Release, Term) are given;
	// otherwise it is ignored.
	AcquireEnd(ctx context.Context, e AcquireEndEvent) context.Context
	// Renewal is called after each renewal of a lease by its watchdog.
	Renewal(ctx context.Context, e RenewalEvent)
	// Loss is called once when a lease is lost (its context cancelled with
	// ErrLockLost), before any Unlock of it returns.
	Loss(ctx context.Context, e LossEvent)
	// Release is called when Unlock of a held lease has returned. A lease ends
	// with exactly one Loss or one Release.
	Release(ctx context.Context, e ReleaseEvent)
	// Abandon is called when an acquisition that gave up removes what its
	// attempts may have left in the store, before AcquireEnd, with the context
	// AcquireStart returned.
	Abandon(ctx context.Context, t Target)
	// Wake is called when a waiter is woken by the store's notification, with
	// the context AcquireStart returned.
	Wake(ctx context.Context, t Target)
	// Term is called when Campaign wins a role (a leader's term begins) and
	// when that term ends (lost or resigned).
	Term(ctx context.Context, e LeadershipEvent)
	// StaleToken is called when a fence helper (redislock.Fence, pglock's
	// Fence) refused a write made with a lease's token because the resource
	// had been written with a newer one: a holder that lost its lock was kept
	// out. See ReportStaleToken.
	StaleToken(ctx context.Context, e StaleTokenEvent)
}

// NopObserver is an Observer that does nothing; embed it in an Observer that
// implements only some of the methods.
type NopObserver struct{}

var _ Observer = NopObserver{}

// AcquireStart returns ctx.
func (NopObserver) AcquireStart(ctx context.Context, _ AcquireStartEvent) context.Context {
	return ctx
}

// AcquireEnd returns ctx.
func (NopObserver) AcquireEnd(ctx context.Context, _ AcquireEndEvent) context.Context { return ctx }

// Renewal does nothing.
func (NopObserver) Renewal(context.Context, RenewalEvent) {}

// Loss does nothing.
func (NopObserver) Loss(context.Context, LossEvent) {}

// Release does nothing.
func (NopObserver) Release(context.Context, ReleaseEvent) {}

// Abandon does nothing.
func (NopObserver) Abandon(context.Context, Target) {}

// Wake does nothing.
func (NopObserver) Wake(context.Context, Target) {}

// Term does nothing.
func (NopObserver) Term(context.Context, LeadershipEvent) {}

// StaleToken does nothing.
func (NopObserver) StaleToken(context.Context, StaleTokenEvent) {}

// WithObserver sets the Observer told of the lifecycle events of the locks
// taken with this option (as a Client default, or for one call). nil removes a
// Client's default Observer for the call. The default is none.
func WithObserver(o Observer) Option {
	return func(c *config) {
		if driver.IsNil(o) {
			c.observer = nil
			return
		}
		c.observer = o
	}
}

// Target names the lock an event is about.
type Target struct {
	Key string
	// Backend names the store: the driver's DriverInfo.Backend ("redislock",
	// "pglock"...), or "unknown" for a call on a nil Client.
	Backend string
	// Kind is the primitive: the driver's DriverInfo.Kind (KindMutex,
	// KindFair, KindReentrant, KindSemaphore, KindRead, KindWrite...), or
	// "unknown" for a call on a nil Client.
	Kind string
}

// AcquireStartEvent is the start of a TryLock or Lock.
type AcquireStartEvent struct {
	Target
	Try bool // true for TryLock or a Lock with WithWait(0), one attempt; false for a Lock that waits
}

// AcquireEndEvent is the end of a TryLock or Lock.
type AcquireEndEvent struct {
	Target
	Try      bool          // as in AcquireStartEvent
	Attempts int           // the attempts made (0 when the request was invalid)
	Wait     time.Duration // from the start of the call to its return
	// Err is nil when acquired; otherwise it matches ErrNotObtained (held by
	// another owner), a context error (the wait ended), ErrInvalid or
	// ErrConflict (bad input), ErrRefused or ErrUnavailable (the backend).
	Err   error
	Lease *Lease // the lease when acquired, otherwise nil
}

// RenewalEvent is one renewal by a lease's watchdog.
type RenewalEvent struct {
	Target
	// Margin is the time that was left to the local deadline when the renewal
	// started: how close the lease came to its loss.
	Margin   time.Duration
	Duration time.Duration // the round trip
	// Err is nil when the lease was extended. Otherwise the renewal failed: when
	// it matches ErrNotHeld the store no longer holds the lock and the lease is
	// lost; any other error is retried within the validity.
	Err error
}

// LossCause is why a lease was lost.
type LossCause string

// The causes of a loss.
const (
	LossNotHeld       LossCause = "not_held"       // a renewal or Extend found the lock gone or someone else's
	LossLocalDeadline LossCause = "local_deadline" // no renewal succeeded before the local deadline
	LossFixedTTL      LossCause = "fixed_ttl"      // a lease without watchdog reached its TTL
	LossMaxHold       LossCause = "max_hold"       // the WithMaxHold cap was reached
	LossStoreSignal   LossCause = "store_signal"   // the store told at once that the holding is gone (Grant.Lost: a force-unlock, a deletion, a session that ended)
)

// LossEvent is the loss of a lease.
type LossEvent struct {
	Target
	Cause LossCause
	Held  time.Duration // from the acquisition to the loss
	Err   error         // the loss, matching ErrLockLost
}

// ReleaseEvent is an Unlock of a held lease.
type ReleaseEvent struct {
	Target
	Held time.Duration // from the acquisition to the release
	// Err is nil when the lock was released; it matches ErrNotHeld when the lock
	// was already gone or someone else's; any other error is a backend failure,
	// and the lock ends at its TTL.
	Err error
}

// LeadershipEvent is a leadership won (Leader true) or ended.
type LeadershipEvent struct {
	Target               // Key is the role
	Leader bool          // true when won, false when it ended
	Held   time.Duration // when ended: the term
	Err    error         // when ended: ErrReleased after Resign, or the loss
}

// target names key on the Client's backend.
func (c *Client) target(key string) Target {
	return Target{Key: key, Backend: c.info.Backend, Kind: c.info.Kind}
}

// observing is what an acquisition with an Observer tells it.
type observing struct {
	t        Target
	ctx      context.Context // from AcquireStart
	attempts int
}

// observed runs a TryLock (wait false) or Lock whose options, resolved with
// error err, name an Observer, telling it of the start and the end.
func (c *Client) observed(ctx context.Context, key string, cfg *config, wait bool, err error) (*Lease, error) {
	if wait && cfg.waitSet && cfg.wait == 0 {
		wait = false
	}
	octx := ctx
	if octx == nil {
		octx = context.Background()
	}
	t := Target{Key: key, Backend: "unknown", Kind: "unknown"}
	if c != nil {
		t = c.target(key)
	}
	start := time.Now()
	ob := &observing{t: t, ctx: cfg.observer.AcquireStart(octx, AcquireStartEvent{Target: t, Try: !wait})}
	if ob.ctx == nil {
		ob.ctx = octx
	}
	var l *Lease
	if err == nil {
		if wait {
			l, err = c.lock(ctx, key, cfg, ob)
		} else {
			l, err = c.once(ctx, key, cfg, ob)
		}
	}
	told := false
	defer l.unlockUnless(&told)
	lctx := cfg.observer.AcquireEnd(ob.ctx, AcquireEndEvent{Target: t, Try: !wait, Attempts: ob.attempts,
		Wait: time.Since(start), Err: err, Lease: l})
	told = true
	if l != nil && l.obs != nil && lctx != nil {
		l.mu.Lock()
		l.obs.ctx = lctx
		l.mu.Unlock()
	}
	return l, err
}

// unlockUnless unlocks l, when it is not nil, unless *told: deferred around
// the Observer call that ends an acquisition, it keeps a lease whose caller
// never gets it, because the hook panicked, from staying held and renewed.
// The panic goes on once the lock is released.
func (l *Lease) unlockUnless(told *bool) {
	if *told || l == nil {
		return
	}
	ctx, cancel := driver.CleanupContext(context.Background())
	defer cancel()
	_ = l.Unlock(ctx)
}

// observeEnd tells the lease's observer of its loss (why, cause).
func (l *Lease) observeEnd(octx context.Context, why LossCause, cause error) {
	held := time.Since(l.acquired)
	l.obs.o.Loss(octx, LossEvent{Target: l.obs.t, Cause: why, Held: held, Err: cause})
	l.observeTermEnd(octx, held, cause)
}

// observeRelease tells the lease's observer of an Unlock that returned err.
func (l *Lease) observeRelease(err error) {
	l.mu.Lock()
	octx := l.obs.ctx
	l.mu.Unlock()
	held := time.Since(l.acquired)
	l.obs.o.Release(octx, ReleaseEvent{Target: l.obs.t, Held: held, Err: err})
	cause := err
	if cause == nil {
		cause = ErrReleased
	}
	l.observeTermEnd(octx, held, cause)
}

// observeTermEnd tells the observer that the leadership held by the lease ended.
func (l *Lease) observeTermEnd(octx context.Context, held time.Duration, cause error) {
	l.mu.Lock()
	leader := l.obs.leader
	l.mu.Unlock()
	if leader {
		l.obs.o.Term(octx, LeadershipEvent{Target: l.obs.t, Held: held, Err: cause})
	}
}

// observeLeader tells the lease's observer that it holds a leadership.
func (l *Lease) observeLeader() {
	if l.zero() || l.obs == nil {
		return
	}
	l.mu.Lock()
	l.obs.leader = true
	octx := l.obs.ctx
	l.mu.Unlock()
	l.obs.o.Term(octx, LeadershipEvent{Target: l.obs.t, Leader: true})
}

// StaleTokenEvent is a fenced write refused because its token was stale.
type StaleTokenEvent struct {
	Target          // the lease's lock
	Resource string // what the write was for: a Redis key, or the lock key for a database fence
	Token    uint64 // the lease's token
	Newest   uint64 // the newer token the resource was written with; 0 when unknown
}

// ReportStaleToken tells the Observer of tok's lease, when tok is a *Lease
// taken with an Observer, that a fenced write made with its token was refused
// because resource had been written with the newer token newest (0 when
// unknown). Fence helpers call it when they return ErrStaleToken; for other
// tokens, and leases without an Observer, it does nothing.
func ReportStaleToken(tok any, resource string, newest uint64) {
	l, ok := tok.(*Lease)
	if !ok || l == nil || l.obs == nil {
		return
	}
	l.mu.Lock()
	octx := l.obs.ctx
	l.mu.Unlock()
	l.obs.o.StaleToken(octx, StaleTokenEvent{Target: l.obs.t, Resource: resource, Token: l.token, Newest: newest})
}
