package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// start arms the deadline timer and the watchdog. The watchdog's goroutine is
// the timer's, started when the first renewal is due: a lease unlocked before
// that costs no goroutine.
func (l *Lease) start() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.timer = time.AfterFunc(time.Until(l.deadline), l.onDeadline)
	if l.renewEvery > 0 {
		l.wdDone = make(chan struct{})
		l.wdTimer = time.AfterFunc(l.renewEvery, l.runWatchdog)
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

// runWatchdog runs the watchdog from its timer, unless the lease has ended or is
// being discarded.
func (l *Lease) runWatchdog() {
	defer close(l.wdDone)
	l.mu.Lock()
	if l.wdEnded || l.state != held {
		l.mu.Unlock()
		return
	}
	ctx, cancel := context.WithCancel(l.ctx)
	l.wdStop = cancel
	l.mu.Unlock()
	defer cancel()
	l.watchdog(ctx)
}

// stopTimers stops the timer and watchdog of a lease that is being discarded,
// waiting for a running watchdog to return.
func (l *Lease) stopTimers() {
	l.mu.Lock()
	if l.timer != nil {
		l.timer.Stop()
	}
	l.wdEnded = true
	wt, stop, done := l.wdTimer, l.wdStop, l.wdDone
	if l.lostStop != nil {
		l.lostStop()
	}
	l.mu.Unlock()
	if wt != nil && !wt.Stop() {
		// The watchdog has started: it either runs (stop is set) or returns at
		// once, having seen wdEnded.
		if stop != nil {
			stop()
		}
		<-done
	}
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
	if l.obs != nil {
		l.observeEnd(octx, why, cause)
	}
	if hook := lostHook.Load(); hook != nil {
		(*hook)(l)
	}
	if release {
		go func() {
			defer close(done)
			ctx, cancel := CleanupContext(context.Background())
			defer cancel()
			_ = l.c.d.Release(ctx, h)
		}()
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

// watchdog renews the lease at once and then every renewEvery until ctx ends, the
// lease is lost, or the MaxHold cap is reached. A failed renewal is retried within
// the remaining validity; each round trip is bounded by the local deadline.
func (l *Lease) watchdog(ctx context.Context) {
	var t *time.Timer
	for {
		if t != nil {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		ttl := l.ttl
		if l.maxHold > 0 {
			left := l.maxHold - time.Since(l.acquired)
			capped, err := l.c.lim.Normalize(min(ttl, left))
			if left <= ttl {
				// This renewal, if any, is the last: the lease ends at the cap.
				l.mu.Lock()
				l.capped = true
				l.mu.Unlock()
			}
			if left < l.c.lim.Min || err != nil {
				return // cap reached: let the lease run out at its TTL
			}
			ttl = capped
		}
		next, stop := l.renew(ctx, ttl)
		if stop {
			return
		}
		if t == nil {
			t = time.NewTimer(next)
			defer t.Stop()
		} else {
			t.Reset(next)
		}
	}
}

// renew makes one watchdog renewal and says when to try next.
func (l *Lease) renew(ctx context.Context, ttl time.Duration) (next time.Duration, stop bool) {
	l.extendMu.Lock()
	defer l.extendMu.Unlock()
	l.mu.Lock()
	deadline := l.deadline
	started := time.Now()
	l.renewAt = started
	l.mu.Unlock()
	rctx, cancel := context.WithDeadline(ctx, deadline)
	err := l.extend(rctx, ttl)
	cancel()
	// In one step, so that a loss at the deadline finds either the renewal in
	// flight or its failure.
	l.mu.Lock()
	l.renewAt = time.Time{}
	told := l.obs != nil && (ctx.Err() == nil || l.state == lost) // not when Unlock stopped it
	switch {
	case err == nil:
		l.renewErr = nil
	case errors.Is(err, ErrNotHeld), ctx.Err() != nil:
	case errors.Is(err, context.DeadlineExceeded) && !time.Now().Before(deadline):
		l.renewErr = fmt.Errorf("no reply in the %v it had before the local deadline", deadline.Sub(started).Round(time.Millisecond))
	default:
		l.renewErr = err
	}
	l.mu.Unlock()
	if told {
		l.observeRenewal(started, deadline, err)
	}
	switch {
	case err == nil:
		return l.renewEvery, false
	case errors.Is(err, ErrNotHeld), ctx.Err() != nil:
		return 0, true
	}
	// Transient failure: retry soon, but well within the remaining validity.
	left := time.Until(deadline)
	if left <= 0 {
		return 0, true // the deadline timer reports the loss
	}
	return max(time.Millisecond, min(l.renewEvery/4, left/3)), false
}
