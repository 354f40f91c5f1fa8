package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// start arms the deadline timer and, for a renewed lease, queues its first
// renewal with the Client's renewer. Neither costs a goroutine of its own.
func (l *Lease) start() {
	l.mu.Lock()
	l.timer = time.AfterFunc(time.Until(l.deadline), l.onDeadline)
	l.mu.Unlock()
	if l.renewEvery > 0 {
		l.c.rn.add(l, time.Now().Add(l.renewEvery))
	}
}

// watchLost loses the lease as soon as lost (Grant.Lost) ends, the driver's
// word that the holding is gone. It costs no goroutine until then.
func (l *Lease) watchLost(lost context.Context) {
	stop := context.AfterFunc(lost, func() {
		_ = l.lose(fmt.Errorf("%w: %w", ErrLockLost, context.Cause(lost)), LossStoreSignal, true)
	})
	l.mu.Lock()
	l.lostStop = stop
	l.mu.Unlock()
}

// stopTimers stops the timer and the renewals of a lease that is being
// discarded. A renewal round trip in flight is not waited for (its outcome is
// dropped), nor one whose outcome is being applied (Unlock waits for that one
// before it tells the release, as long as its context allows; see settled).
func (l *Lease) stopTimers() {
	l.mu.Lock()
	if l.timer != nil {
		l.timer.Stop()
	}
	if l.lostStop != nil {
		l.lostStop()
	}
	l.mu.Unlock()
	l.c.rn.remove(l, true)
	l.cancel(ErrReleased)
}

// lose ends a held lease with cause and returns the cause. With release (a loss
// on the local side: the deadline passed with the store's state unknown), one
// best-effort, owner-checked release follows on a detached, bounded context, so
// that a store that does not forget on its own (a ZooKeeper node while its
// session lives) frees the lock now, and a store with expiring keys a little before its expiry.
func (l *Lease) lose(cause error, why LossCause, release bool) error {
	l.mu.Lock()
	if l.state != held {
		l.mu.Unlock()
		return l.check()
	}
	l.state = lost
	l.timer.Stop()
	var done chan struct{}
	if release {
		done = make(chan struct{})
		l.lossDone = done
	}
	h := l.holding(l.cur)
	// Cancelled before the state is seen: whoever finds the lease lost finds
	// Done closed and the cause set, not a lease that is neither held nor lost.
	l.cancel(cause)
	var octx context.Context
	if l.obs != nil {
		octx = l.obs.ctx
	}
	l.mu.Unlock()
	if l.renewEvery > 0 {
		l.c.rn.remove(l, false)
	}
	if release {
		// Started once the loss is told, and also when the Observer panics.
		defer func() {
			go func() {
				defer close(done)
				ctx, cancel := driver.CleanupContext(context.Background())
				defer cancel()
				_ = l.c.d.Release(ctx, h)
			}()
		}()
	}
	if l.obs != nil {
		l.observeEnd(octx, why, cause)
	}
	if hook := lostHook.Load(); hook != nil {
		(*hook)(l)
	}
	return cause
}

func (l *Lease) onDeadline() {
	l.mu.Lock()
	if l.state != held {
		l.mu.Unlock()
		return
	}
	if d := time.Until(l.deadline); d > 0 && !l.pastDeadline() { // extended meanwhile
		l.timer.Reset(d)
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	_ = l.lose(l.expiry(), l.expiryCause(), true)
}

// renewTTL returns the TTL of the lease's next renewal, capped by MaxHold, and
// false when the cap is reached: renewal stops and the lease runs out at its TTL.
// A capped TTL is rounded down to the store's step, so that the lease never
// outlives the cap.
func (l *Lease) renewTTL() (time.Duration, bool) {
	ttl := l.ttl
	if l.maxHold <= 0 {
		return ttl, true
	}
	left := l.maxHold - time.Since(l.acquired)
	if left > ttl {
		return ttl, true
	}
	// This renewal, if any, is the last: the lease ends at the cap.
	l.mu.Lock()
	l.capped = true
	l.mu.Unlock()
	left -= left % max(l.c.lim.Step, 1)
	if left < l.c.lim.Min {
		return 0, false
	}
	return left, true
}

// renewBegin marks a renewal round trip asking for ttl starting at started
// (bootStart on the boot clock), and returns the local deadline it must beat;
// l.extendMu is held.
func (l *Lease) renewBegin(started time.Time, bootStart, ttl time.Duration) (deadline time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.renewAt = started
	l.bound(started, bootStart, ttl)
	return l.deadline
}

// renewEnd applies the outcome of a renewal round trip that started at started
// (bootStart on the boot clock) with the local deadline then at deadline, asking
// for ttl: the lease is extended, lost (the store no longer holds it) or left to
// a retry. It says when to renew next, or to stop. No extendMu is held: the
// holder's own Extend may run meanwhile.
func (l *Lease) renewEnd(started time.Time, bootStart time.Duration, deadline time.Time, ttl time.Duration, res driver.ExtendResult) (next time.Duration, stop bool) {
	l.mu.Lock()
	gone := l.state != held
	l.mu.Unlock()
	err := context.Canceled // the lease was lost while the renewal was in flight
	if !gone {
		err = l.extendOutcome(started, bootStart, ttl, res)
	}
	// In one step, so that a loss at the deadline finds either the renewal in
	// flight or its failure.
	l.mu.Lock()
	l.renewAt = time.Time{}
	ended := l.state != held
	told := l.obs != nil && l.state != released // not when Unlock stopped it
	switch {
	case err == nil:
		l.renewErr = nil
	case errors.Is(err, ErrNotHeld), ended:
	case errors.Is(err, context.DeadlineExceeded) && !time.Now().Before(deadline):
		l.renewErr = fmt.Errorf("no reply in the %v it had before the local deadline", deadline.Sub(started).Round(time.Millisecond))
	default:
		l.renewErr = err
	}
	l.mu.Unlock()
	if told {
		// A panic here ends the program (nothing recovers on the renewer's
		// goroutine): the lock is released first, not left until its TTL.
		ok := false
		defer l.dropUnless(&ok)
		l.observeRenewal(started, deadline, err)
		ok = true
	}
	switch {
	case err == nil:
		return l.renewEvery, false
	case errors.Is(err, ErrNotHeld), ended:
		return 0, true
	}
	return l.retryIn(deadline)
}

// retryIn says when to retry a renewal that could not be made, within the
// validity left before deadline; stop when none is left (the deadline timer
// reports the loss).
func (l *Lease) retryIn(deadline time.Time) (next time.Duration, stop bool) {
	left := time.Until(deadline)
	if left <= 0 {
		return 0, true
	}
	return max(time.Millisecond, min(l.renewEvery/4, left/3)), false
}

// dropUnless, unless *ok, ends the lease as released and releases its lock on
// a detached, bounded context, telling the Observer nothing: deferred around a
// hook called on dlock's own goroutine, where a panic ends the program, it
// frees the lock before the program ends.
func (l *Lease) dropUnless(ok *bool) {
	if *ok {
		return
	}
	l.mu.Lock()
	st := l.state
	l.state = released
	l.mu.Unlock()
	l.stopTimers()
	if st != held {
		return
	}
	ctx, cancel := driver.CleanupContext(context.Background())
	defer cancel()
	_ = l.c.d.Release(ctx, l.holding(l.currentTTL()))
}
