// Package jobhold keeps the lease of a finished scheduled job until its
// min-hold has passed: a scheduler whose clock runs a little behind then finds
// the job still locked and skips the run another instance made. It is the
// part that the scheduler adapters (dlockgocron, dlockcron, and an adapter of
// your own) share, released with the root module so that an adapter of an
// older release builds with a newer root.
package jobhold

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
)

// releaseTimeout bounds a release made when a min-hold ends.
const releaseTimeout = 5 * time.Second

// Holds are the leases of an adapter's jobs: those of running jobs, by job
// name, and those kept past their job's end for the min-hold. The zero value is
// ready; it is safe for concurrent use.
type Holds struct {
	mu      sync.Mutex
	closed  bool
	running map[string]*dlock.Lease
	held    map[*dlock.Lease]*time.Timer
	wg      sync.WaitGroup // releases not yet made
}

// Closed reports whether Close was called.
func (h *Holds) Closed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closed
}

// Track records lease as the running job name's, and reports false (recording
// nothing) after Close.
func (h *Holds) Track(name string, lease *dlock.Lease) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	if h.running == nil {
		h.running = map[string]*dlock.Lease{}
	}
	h.running[name] = lease
	return true
}

// Lease returns the lease of the running job name, or nil.
func (h *Holds) Lease(name string) *dlock.Lease {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.running[name]
}

// Release ends the run of job name (Track) and its hold on lease, taken at start:
// at once when minHold has
// passed since start, when the lease is no longer held, or after Close; and
// otherwise at start+minHold, on a timer (Release then returns nil at once; the
// watchdog goes on renewing the lease meanwhile). An immediate release returns
// Unlock's error.
func (h *Holds) Release(ctx context.Context, name string, lease *dlock.Lease, start time.Time, minHold time.Duration) error {
	h.mu.Lock()
	if h.running[name] == lease {
		delete(h.running, name)
	}
	rest := minHold - time.Since(start)
	if rest <= 0 || h.closed || lease.Err() != nil {
		h.mu.Unlock()
		return lease.Unlock(ctx)
	}
	if h.held == nil {
		h.held = map[*dlock.Lease]*time.Timer{}
	}
	h.wg.Add(1)
	h.held[lease] = time.AfterFunc(rest, func() {
		h.mu.Lock()
		_, mine := h.held[lease]
		delete(h.held, lease)
		h.mu.Unlock()
		if !mine {
			return // Close released it
		}
		defer h.wg.Done()
		rctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		defer cancel()
		_ = lease.Unlock(rctx)
	})
	h.mu.Unlock()
	return nil
}

// Close makes later Release calls release at once, and waits until the leases
// kept for their min-hold have been released, or until ctx ends, when it
// releases the rest at once. It returns the errors of those releases.
func (h *Holds) Close(ctx context.Context) error {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	done := make(chan struct{})
	go func() { h.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	h.mu.Lock()
	var now []*dlock.Lease
	for lease, t := range h.held {
		if t.Stop() {
			delete(h.held, lease)
			now = append(now, lease)
		}
	}
	h.mu.Unlock()
	var errs []error
	for _, lease := range now {
		errs = append(errs, lease.Unlock(ctx))
		h.wg.Done()
	}
	<-done
	return errors.Join(errs...)
}

// Settings are the options the scheduler adapters share: the min-hold, the
// lock options of every TryLock, and the first invalid option's error.
type Settings struct {
	MinHold time.Duration
	Opts    []dlock.Option
	Err     error
}

// SetMinHold sets the min-hold; a negative d records an error matching
// dlock.ErrInvalid.
func (s *Settings) SetMinHold(d time.Duration) {
	if d < 0 {
		s.Fail(fmt.Errorf("%w: min hold %v is negative", dlock.ErrInvalid, d))
		return
	}
	s.MinHold = d
}

// Fail records err unless an earlier error was recorded.
func (s *Settings) Fail(err error) {
	if s.Err == nil {
		s.Err = err
	}
}
