package dlock

import (
	"context"
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
// word that the holding is gone. It costs no goroutine until then; a
// *driver.LossSignal costs no allocation but the watcher, and is unwatched as
// soon as the lease ends.
func (l *Lease) watchLost(lost context.Context) {
	if sig, ok := lost.(*driver.LossSignal); ok {
		l.mu.Lock()
		l.lostSig = sig
		l.mu.Unlock()
		sig.Watch((*pushWatcher)(l))
		return
	}
	stop := context.AfterFunc(lost, func() { l.pushed(context.Cause(lost)) })
	l.mu.Lock()
	l.lostStop = stop
	l.mu.Unlock()
}

// pushWatcher is a Lease as the driver.LossWatcher of its LossSignal.
type pushWatcher Lease

// Lost loses the lease whose LossSignal the driver ended.
func (w *pushWatcher) Lost() {
	l := (*Lease)(w)
	l.mu.Lock()
	sig := l.lostSig
	l.mu.Unlock()
	l.pushed(sig.Cause())
}

// pushed loses the lease the driver told is gone, for cause. Past the local
// deadline, whose timer has not fired yet (a loaded or suspended host's), the
// loss is the expiry, named as the deadline names it: the store lets a
// holding go only after that deadline, and may tell so first.
func (l *Lease) pushed(cause error) {
	l.mu.Lock()
	past := l.state == held && l.pastDeadline()
	l.mu.Unlock()
	if past {
		_ = l.lose(l.expiry(), l.expiryCause(), true)
		return
	}
	_ = l.lose(fmt.Errorf("%w: %w", ErrLockLost, cause), LossStoreSignal, true)
}

// unwatchLost stops watching the driver's LossSignal, if any: the lease has
// ended, and the driver may forget the holding.
func (l *Lease) unwatchLost() {
	l.mu.Lock()
	sig := l.lostSig
	l.mu.Unlock()
	if sig != nil {
		sig.Unwatch()
	}
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
	l.unwatchLost()
	l.c.rn.remove(l, true)
	l.cancel(ErrReleased)
}

// lose ends a held lease with cause and returns the cause. With release (a loss
// on the local side: the deadline passed with the store's state unknown), one
// best-effort, owner-checked release follows on a detached, bounded context, so
// that a store that does not forget on its own (a ZooKeeper node while its
// session lives) frees the lock now, and a store with expiring keys a little before its expiry.
// A lease with a lock-delay is not released so: its holding runs out in the
// store, and the delay follows.
func (l *Lease) lose(cause error, why LossCause, release bool) error {
	// The driver stops watching the holding before anybody sees the loss.
	l.unwatchLost()
	release = release && l.delay == 0
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
	if deadlineIgnored {
		return
	}
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

// pastDeadline reports whether the local validity has run out, on either the
// monotonic clock or the suspend-aware one. A suspended host wakes up with its
// monotonic clock (and so its timers) behind the server's: only the second clock
// sees the lease as gone. l.mu is held.
func (l *Lease) pastDeadline() bool {
	if !time.Now().Before(l.deadline) {
		return true
	}
	if l.bootOK {
		if b, ok := l.boot(); ok && b-l.bootAt >= l.valid {
			return true
		}
	}
	return false
}

// expireIfPast ends a held lease whose local validity has run out, without waiting
// for the deadline timer: a holder resumed from a pause or a suspend learns of the
// loss at its first check, not when a late timer fires.
func (l *Lease) expireIfPast() {
	if deadlineIgnored {
		return
	}
	l.mu.Lock()
	past := l.state == held && l.pastDeadline()
	l.mu.Unlock()
	if past {
		_ = l.lose(l.expiry(), l.expiryCause(), true)
	}
}

// expiry is the loss of a lease whose local deadline has passed, naming why no
// renewal kept it: a fixed lease (no watchdog) whose TTL ran out, the MaxHold
// cap, renewals that failed (with the last failure), or a pause or suspend of
// the process that outlasted the validity.
func (l *Lease) expiry() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	suspended := ""
	if time.Now().Before(l.deadline) {
		suspended = " (the host was suspended past it)"
	}
	switch {
	case l.renewEvery == 0:
		return fmt.Errorf("%w: the fixed lease's TTL of %v ran out%s (no watchdog renews a lease with WithTTL unless WithAutoRenew(true) is given)",
			ErrLockLost, l.cur, suspended)
	case l.capped:
		return fmt.Errorf("%w: held for the MaxHold cap of %v: renewal stopped and the TTL of %v ran out%s",
			ErrLockLost, l.maxHold, l.cur, suspended)
	}
	// Failures are told, not wrapped: the loss must not match a context or
	// backend error.
	why := " (was the process paused?)"
	switch {
	case !l.renewAt.IsZero() && l.renewErr != nil:
		why = fmt.Sprintf("; the last renewal failed (%s), and the one in flight for %v had no reply yet",
			oneLine(l.renewErr), time.Since(l.renewAt).Round(time.Millisecond))
	case !l.renewAt.IsZero():
		why = fmt.Sprintf("; the renewal in flight for %v had no reply yet", time.Since(l.renewAt).Round(time.Millisecond))
	case l.renewErr != nil:
		why = "; the last renewal failed: " + oneLine(l.renewErr)
	}
	return fmt.Errorf("%w: no renewal succeeded before the local deadline%s%s", ErrLockLost, suspended, why)
}

// expiryCause names why a lease past its local deadline is lost (see expiry).
func (l *Lease) expiryCause() LossCause {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.renewEvery == 0:
		return LossFixedTTL
	case l.capped:
		return LossMaxHold
	}
	return LossLocalDeadline
}
