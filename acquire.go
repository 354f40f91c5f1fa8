package dlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// acquisition is one TryLock or Lock call: its attempts share one owner, so that
// an attempt whose reply was lost is found again by the next one (Acquire is
// idempotent for its owner), and a give-up can abandon them all.
type acquisition struct {
	c          *Client
	key        string
	cfg        *config
	owner      string
	waiting    bool
	handle     any           // the last Taken's Handle
	retryAfter time.Duration // the last Taken's RetryAfter
	dirty      bool          // an attempt may have left state behind: abandon on give-up
	start      time.Time
	tried      time.Time  // the start of the last attempt
	busy       *BusyError // the last attempt that found the lock held
	failed     error      // the last failure since then that the context did not cause
	ob         *observing // what the Observer is told; nil without one
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
	if a.ob != nil {
		a.ob.attempts++
	}
	g, err := a.c.d.Acquire(ctx, driver.AcquireRequest{
		Key: a.key, Owner: a.owner, TTL: a.cfg.ttl, Metadata: a.cfg.metadata,
		Waiting: a.waiting, Handle: a.handle, Delay: a.cfg.lockDelay,
	})
	if err != nil {
		var busy *driver.Taken
		switch {
		case errors.As(err, &busy):
			if busy.Handle != nil {
				a.handle = busy.Handle
			}
			a.dirty = a.dirty || busy.Queued
			a.retryAfter = busy.RetryAfter
			return nil, &BusyError{Remaining: busy.Remaining} // callers see no driver state
		case errors.Is(err, ErrInvalid), errors.Is(err, ErrConflict), errors.Is(err, driver.ErrNotSent), neverSent(err):
		default:
			a.dirty = true // no answer, or one we cannot read: it may have landed
		}
		return nil, err
	}
	l, err := a.c.granted(a.key, a.owner, g, start, a.cfg)
	if err != nil {
		// The holding is ours: a retry takes it again with a fresh validity.
		a.dirty = true
		return nil, err
	}
	return l, nil
}

// granted makes and starts the lease of g, the grant of key to owner by a
// round trip that started at start. A grant whose reply came back too late for
// the lease to be of any use is dropped (the holding stays owner's in the
// store until its TTL) with an error matching ErrUnavailable.
func (c *Client) granted(key, owner string, g driver.Grant, start time.Time, cfg *config) (*Lease, error) {
	ttl := g.TTL
	if ttl <= 0 {
		ttl = cfg.ttl
	}
	l := newLease(c, driver.Holding{Key: key, Owner: owner, TTL: ttl, Handle: g.Handle}, g.Token, start, cfg)
	if !time.Now().Before(l.deadline) {
		l.stopTimers()
		if sig, ok := g.Lost.(*driver.LossSignal); ok {
			sig.Unwatch() // the driver may forget the holding
		}
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
	var timer *time.Timer // made at the first wait: a free lock needs none
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
			if nf, ok := a.c.d.(driver.Notifier); ok {
				h := driver.Holding{Key: a.key, Owner: a.owner, TTL: a.cfg.ttl, Handle: a.handle}
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
			case wake != nil && a.retryAfter > 0:
				delay = a.retryAfter
			case busy.Remaining >= 0 && (wake != nil || delay > busy.Remaining+time.Millisecond):
				// Expiry has millisecond resolution: wake just after it.
				delay = busy.Remaining + time.Millisecond
			}
		} else if delay > failLeft {
			delay = failLeft // one last attempt at the limit
		}
		if timer == nil {
			timer = time.NewTimer(delay)
			defer timer.Stop()
		} else {
			timer.Reset(delay)
		}
		select {
		case <-ctx.Done():
			return nil, a.final(ctx, err, n)
		case _, ok := <-wake:
			if !ok {
				wake = nil // notifications stopped: poll
			} else if a.ob != nil {
				a.cfg.observer.Wake(a.ob.ctx, a.ob.t)
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
	cctx, cancel := driver.CleanupContext(ctx)
	defer cancel()
	h := driver.Holding{Key: a.key, Owner: a.owner, TTL: a.cfg.ttl, Handle: a.handle}
	// Deferred: the clean-up runs after the Abandon event, and also when the
	// Observer panics.
	defer func() {
		if ab, ok := a.c.d.(driver.Abandoner); ok {
			_ = ab.Abandon(cctx, h)
			return
		}
		_ = a.c.d.Release(cctx, h)
	}()
	if a.ob != nil {
		a.cfg.observer.Abandon(a.ob.ctx, a.ob.t)
	}
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
