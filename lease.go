package dlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/driver"
)

type leaseState uint8

const (
	held leaseState = iota
	lost
	released
)

// Lease is a held lock: the handle returned by TryLock and Lock. It carries the
// lock's key and fencing token, a context that ends the moment the lock can no
// longer be guaranteed, and the operations only the holder may perform.
//
// The lock can be lost before Unlock: when a renewal is refused, or when no renewal
// has succeeded by the lease's local deadline (see Deadline). The loss's error
// names which: the store no longer holds the lock for this owner (expired,
// force-unlocked or taken), a fixed lease's TTL ran out, the MaxHold cap was
// reached, or renewals failed (with the last failure). Done is closed and
// Context is cancelled with cause ErrLockLost strictly before any other client can
// obtain the lock, provided clocks drift less than the drift margin. Work that must
// never run twice should also pass Token to the protected resource (fencing), since
// no lease can survive an unbounded pause of its holder.
//
// A Lease is safe for concurrent use. The methods of a nil *Lease, or of a zero
// Lease not made by a Locker, report ErrNotHeld.
type Lease struct {
	c          *Client
	key, owner string
	handle     any // the driver's state for the holding (Grant.Handle)
	token      uint64
	acquired   time.Time
	ttl        time.Duration // the TTL the watchdog renews with
	drift      float64
	delay      time.Duration // the lock-delay it was taken with: a local loss releases nothing then
	renewEvery time.Duration
	maxHold    time.Duration

	ctx    context.Context
	cancel context.CancelCauseFunc

	extendMu sync.Mutex // serialises Extend round trips (user and watchdog)

	mu       sync.Mutex
	state    leaseState
	cur      time.Duration                // the TTL of the last acquire or extend
	lossDone chan struct{}                // closed when the release after a loss has returned; nil without one
	deadline time.Time                    // local validity deadline, on the monotonic clock
	valid    time.Duration                // deadline minus the start of the last round trip
	boot     func() (time.Duration, bool) // bootClock when the lease was made
	bootAt   time.Duration                // boot clock at that start
	bootOK   bool
	timer    *time.Timer
	renewErr error              // the last failed renewal since the last success
	renewAt  time.Time          // the start of the renewal in flight; zero when none
	capped   bool               // the watchdog's renewals end at the MaxHold cap
	lostStop func() bool        // unregisters the watch of Grant.Lost; nil without one
	lostSig  *driver.LossSignal // Grant.Lost when it is one; nil otherwise
	extStart time.Time          // the start of the last extend applied
	cutStart time.Time          // the start of the last extend that brought the deadline forward (bound)

	re renewEntry // the lease's place in its Client's renewer; guarded by the renewer's mu

	obs *leaseObs // nil without an Observer
}

// leaseObs is what a lease with an Observer keeps for it; ctx and leader are
// guarded by the lease's mu.
type leaseObs struct {
	o      Observer
	t      Target          // the lock, as o is told of it
	ctx    context.Context // the context of o's events, from AcquireEnd
	leader bool            // a Campaign's lease: its end is a Leadership event too
}

func newLease(c *Client, h driver.Holding, token uint64, start time.Time, cfg *config) *Lease {
	l := &Lease{
		c: c, key: h.Key, owner: h.Owner, handle: h.Handle, token: token,
		acquired: start, ttl: h.TTL, drift: cfg.drift, maxHold: cfg.maxHold,
		re: renewEntry{idx: -1}, delay: cfg.lockDelay,
	}
	if cfg.renewing() {
		l.renewEvery = cfg.renewEvery
	}
	if cfg.observer != nil {
		l.obs = &leaseObs{o: cfg.observer, t: c.target(h.Key), ctx: context.Background()}
	}
	l.ctx, l.cancel = context.WithCancelCause(context.Background())
	l.cur = h.TTL
	l.valid = h.TTL - driftMargin(h.TTL, cfg.drift)
	l.deadline = start.Add(l.valid)
	l.boot = bootClock
	if b, ok := l.boot(); ok {
		l.bootAt, l.bootOK = b-time.Since(start), true
	}
	return l
}

// bootClock reads a clock that, unlike Go's monotonic clock, keeps running while
// the host is suspended (CLOCK_BOOTTIME on Linux); ok is false where there is none.
// A variable so that tests can simulate a suspend.
var bootClock = readBootClock

// lostHook, when set by a test, runs in lose once the loss is visible to other
// goroutines and before lose returns.
var lostHook atomic.Pointer[func(*Lease)]

// oneLine returns err's text on one line.
func oneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }

// zero reports whether l is nil or a zero Lease (not made by a Locker): such a
// lease holds nothing, and its methods report ErrNotHeld.
func (l *Lease) zero() bool { return l == nil || l.c == nil }

// holding names the lease's holding to the driver, with ttl as its TTL.
func (l *Lease) holding(ttl time.Duration) driver.Holding {
	return driver.Holding{Key: l.key, Owner: l.owner, TTL: ttl, Handle: l.handle}
}

// Key returns the lock key.
func (l *Lease) Key() string {
	if l.zero() {
		return ""
	}
	return l.key
}

// Token returns the fencing token of this acquisition: strictly greater than the
// token of every earlier acquisition of the same key. Pass it to the resource the
// lock protects and have the resource refuse tokens older than the newest it has
// seen. Tokens are never 0.
func (l *Lease) Token() uint64 {
	if l.zero() {
		return 0
	}
	return l.token
}

// Owner returns the owner token under which this lease holds the lock: random,
// after the WithOwner ID and OwnerSep when one was given.
func (l *Lease) Owner() string {
	if l.zero() {
		return ""
	}
	return l.owner
}

var closedCh = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Done returns a channel that is closed when the lease ends: lost (see Lease) or
// released by Unlock. Context(ctx).Err and Err tell which.
func (l *Lease) Done() <-chan struct{} {
	if l.zero() {
		return closedCh
	}
	return l.ctx.Done()
}

// Context returns a context that is cancelled when the lease ends. Its cause
// (context.Cause) is ErrLockLost (wrapped, with the reason) when the lock was lost,
// and ErrReleased after Unlock. Run the protected work under this context.
func (l *Lease) Context() context.Context {
	if l.zero() {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(ErrNotHeld)
		return ctx
	}
	return l.ctx
}

// Err returns nil while the lease is held, and otherwise why it ended: an error
// matching ErrLockLost, or ErrReleased. It checks the local deadline itself, so a
// holder that was paused or suspended past it sees the loss at once, even before
// Done is closed.
func (l *Lease) Err() error {
	if l.zero() {
		return ErrNotHeld
	}
	l.expireIfPast()
	if l.ctx.Err() == nil {
		return nil
	}
	return context.Cause(l.ctx)
}

// Deadline returns the local validity deadline: the start of the last successful
// acquire or extend round trip plus its TTL minus the drift margin, on the
// monotonic clock. An extend (Extend, or a renewal) that asks for less time than
// is left brings it forward to the start of that extend plus its TTL minus the
// margin as soon as it is sent, since the store may apply it before its reply
// comes back, and keeps it there when the extend fails. Past it, the lease is
// lost unless extended.
func (l *Lease) Deadline() time.Time {
	if l.zero() {
		return time.Time{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// Extend resets the lock's remaining time to ttl, if the lease still holds it. It
// never re-creates an expired lock: it returns an error matching ErrLockLost (and
// so ErrNotHeld) when the lock is gone or belongs to somebody else, and the lease
// ends. A ttl shorter than the time left shortens the local deadline when the
// request is sent, whatever its outcome (see Deadline). The watchdog, if on,
// keeps renewing with the lease's original TTL.
func (l *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	if l.zero() {
		return ErrNotHeld
	}
	if ctx == nil {
		return invalidf("nil context")
	}
	ttl, err := l.c.lim.Normalize(ttl)
	if err != nil {
		return err
	}
	if err := checkValidity(ttl, l.drift); err != nil {
		return err
	}
	l.extendMu.Lock()
	defer l.extendMu.Unlock()
	return l.extend(ctx, ttl)
}

// extend runs one extend round trip; extendMu is held.
func (l *Lease) extend(ctx context.Context, ttl time.Duration) error {
	if err := l.check(); err != nil {
		return err
	}
	bootStart, _ := l.boot()
	start := time.Now()
	l.mu.Lock()
	l.bound(start, bootStart, ttl)
	l.mu.Unlock()
	granted, err := l.c.d.Extend(ctx, l.holding(ttl), ttl)
	return l.extendOutcome(start, bootStart, ttl, driver.ExtendResult{TTL: granted, Err: err})
}

// extendOutcome applies the outcome of an extend round trip asking for ttl that
// started at start (bootStart on the boot clock): the lease is extended, or lost
// when the store no longer holds it; other failures are returned as they are.
func (l *Lease) extendOutcome(start time.Time, bootStart, ttl time.Duration, res driver.ExtendResult) error {
	switch {
	case res.Err == nil:
		return l.extended(start, bootStart, max(res.TTL, ttl))
	case errors.Is(res.Err, ErrNotHeld):
		return l.lose(&extendRefusedError{res.Err}, LossNotHeld, false)
	}
	return res.Err
}

// extendRefusedError is the loss of a lease whose extension the store refused
// because it no longer holds the lock for it. It matches ErrLockLost and the
// backend's error, whose text (another "not held") it leaves out.
type extendRefusedError struct{ cause error }

func (e *extendRefusedError) Error() string {
	return ErrLockLost.Error() + ": extend refused: the store no longer holds it for this lease (expired, force-unlocked or taken by another owner)"
}

func (e *extendRefusedError) Unwrap() []error { return []error{ErrLockLost, e.cause} }

// TTL returns the time the lock has left as the server sees it, if the lease still
// holds it; otherwise an error matching ErrNotHeld.
func (l *Lease) TTL(ctx context.Context) (time.Duration, error) {
	if l.zero() {
		return 0, ErrNotHeld
	}
	if ctx == nil {
		return 0, invalidf("nil context")
	}
	if err := l.check(); err != nil {
		return 0, err
	}
	return l.c.d.TTL(ctx, l.holding(l.currentTTL()))
}

// Unlock releases the lock if the lease still holds it, stopping the watchdog
// first. It touches nothing that is not this lease's: after expiry, or once another
// owner holds the key, it returns an error matching ErrNotHeld. A second Unlock
// returns ErrNotHeld without I/O. If ctx has already ended, the release is still
// attempted on a detached context bounded by a short timeout, so that a cancelled
// caller does not leave the lock behind until its TTL. After a loss, Unlock
// returns the loss (ErrLockLost) once the release that followed it has returned.
// With an Observer, Unlock tells the release after the renewal of the lease that
// is being told, if any, but waits for that hook only until ctx ends: the lock
// is released in the store first.
func (l *Lease) Unlock(ctx context.Context) error {
	if l.zero() {
		return ErrNotHeld
	}
	if ctx == nil {
		return invalidf("nil context")
	}
	l.expireIfPast() // report a loss its timer has not delivered yet
	l.mu.Lock()
	st := l.state
	if st == released {
		l.mu.Unlock()
		return fmt.Errorf("%w: already unlocked", ErrNotHeld)
	}
	l.state = released
	lossDone := l.lossDone
	l.mu.Unlock()
	l.stopTimers() // also cancels the lease context with ErrReleased (kept if lost)

	if st == lost {
		// Released after the loss already, if it could still be ours.
		if lossDone != nil {
			select {
			case <-lossDone:
			case <-ctx.Done():
			}
		}
		l.c.rn.settled(ctx, l) // a loss a renewal found is told first
		return context.Cause(l.ctx)
	}
	if l.obs == nil {
		return l.release(ctx)
	}
	err := l.release(ctx)
	l.c.rn.settled(ctx, l) // a renewal being told is told first
	l.observeRelease(err)
	return err
}

func (l *Lease) release(ctx context.Context) error {
	if ctx.Err() == nil {
		err := l.c.d.Release(ctx, l.holding(l.currentTTL()))
		if err == nil || errors.Is(err, ErrNotHeld) || errors.Is(err, ErrConflict) || ctx.Err() == nil {
			return err
		}
	}
	cctx, cancel := driver.CleanupContext(ctx)
	defer cancel()
	return l.c.d.Release(cctx, l.holding(l.currentTTL()))
}

func (l *Lease) currentTTL() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cur
}

// check returns the error for a lease that no longer holds its lock.
func (l *Lease) check() error {
	l.expireIfPast()
	l.mu.Lock()
	defer l.mu.Unlock()
	switch l.state {
	case released:
		return fmt.Errorf("%w: unlocked", ErrNotHeld)
	case lost:
		return context.Cause(l.ctx)
	}
	return nil
}

// bound brings the local deadline forward to what an extend asking for ttl,
// whose round trip starts at start (bootStart on the boot clock), leaves, when
// that is earlier: the store may apply the extend at any moment from start on,
// and one that asks for less than the time left shortens the holding there,
// whether or not its reply ever comes back. l.mu is held.
func (l *Lease) bound(start time.Time, bootStart, ttl time.Duration) {
	valid := ttl - driftMargin(ttl, l.drift)
	if dl := start.Add(valid); l.state == held && dl.Before(l.deadline) {
		l.deadline, l.valid, l.bootAt = dl, valid, bootStart
		l.cutStart = start
		l.timer.Reset(time.Until(dl))
	}
}

// extended records a successful extend whose round trip started at start.
func (l *Lease) extended(start time.Time, bootStart, ttl time.Duration) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch l.state {
	case released:
		return fmt.Errorf("%w: unlocked", ErrNotHeld)
	case lost: // the deadline passed while the extend was in flight: never resurrect
		return context.Cause(l.ctx)
	}
	if start.Before(l.extStart) {
		// An extend that started after this one's reply has been applied
		// already: it landed later, and its TTL is the store's.
		return nil
	}
	valid := ttl - driftMargin(ttl, l.drift)
	if start.Before(l.cutStart) && !start.Add(valid).Before(l.deadline) {
		// An extend that started after this one's reply asked for less, and
		// has not been applied: landed or not, it may have shortened the
		// holding at the store after this one.
		return nil
	}
	l.extStart = start
	l.cur = ttl
	l.valid = valid
	l.deadline = start.Add(valid)
	l.bootAt = bootStart
	l.timer.Reset(time.Until(l.deadline))
	return nil
}
