package driver

import (
	"context"
	"sync"
	"time"
)

// LossSignal is a Grant.Lost that costs a driver one small allocation per
// holding (it may be embedded in the driver's own record of the holding),
// for stores that push the news of a lost holding (a message, a watch): the
// driver calls Lose when the store says the holding is gone, and the Client
// loses the lease at once, with the cause given. The Client watches it with
// Watch and stops with Unwatch when the lease ends, whatever ended it; the
// driver learns of that through Forgetter, and drops its record then.
//
// It is a context.Context (cancelled, with context.Canceled as its Err, once
// lost) so that it can stand wherever a Grant.Lost does.
type LossSignal struct {
	// Forgetter, when set before the Grant is returned, is told once, when
	// the Client unwatches the signal.
	Forgetter Forgetter

	mu      sync.Mutex
	w       LossWatcher
	done    chan struct{}
	cause   error
	lost    bool
	unwatch bool
}

// LossWatcher is told that a LossSignal was lost.
type LossWatcher interface {
	Lost()
}

// funcWatcher is a LossWatcher that runs a function.
type funcWatcher func()

func (f funcWatcher) Lost() { f() }

// Forgetter is told that the Client no longer watches a LossSignal: the lease
// it signals for has ended.
type Forgetter interface {
	Forget(s *LossSignal)
}

var _ context.Context = (*LossSignal)(nil)

// Lose ends the signal with cause, once, and reports whether this call did.
// A watcher runs in a goroutine of its own.
func (s *LossSignal) Lose(cause error) bool {
	s.mu.Lock()
	if s.lost {
		s.mu.Unlock()
		return false
	}
	s.lost, s.cause = true, cause
	if s.done != nil {
		close(s.done)
	}
	w := s.w
	s.w = nil
	s.mu.Unlock()
	if w != nil {
		go w.Lost()
	}
	return true
}

// Watch has w told, in a goroutine of its own, when the signal is lost (at
// once if it is already). A later Watch replaces w.
func (s *LossSignal) Watch(w LossWatcher) {
	s.mu.Lock()
	if s.lost {
		s.mu.Unlock()
		go w.Lost()
		return
	}
	s.w = w
	s.mu.Unlock()
}

// Unwatch stops a watcher that has not been started, and tells the
// Forgetter, the first time only.
func (s *LossSignal) Unwatch() {
	s.mu.Lock()
	s.w = nil
	first := !s.unwatch
	s.unwatch = true
	fg := s.Forgetter
	s.mu.Unlock()
	if first && fg != nil {
		fg.Forget(s)
	}
}

// Cause returns the cause given to Lose, nil before.
func (s *LossSignal) Cause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cause
}

// AfterFunc implements what context.AfterFunc uses.
func (s *LossSignal) AfterFunc(f func()) (stop func() bool) {
	s.Watch(funcWatcher(f))
	return func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		stopped := s.w != nil
		s.w = nil
		return stopped
	}
}

// Deadline implements context.Context: none.
func (s *LossSignal) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done implements context.Context: closed once lost.
func (s *LossSignal) Done() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done == nil {
		s.done = make(chan struct{})
		if s.lost {
			close(s.done)
		}
	}
	return s.done
}

// Err implements context.Context: context.Canceled once lost (Cause says why).
func (s *LossSignal) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lost {
		return context.Canceled
	}
	return nil
}

// Value implements context.Context: it carries no values.
func (s *LossSignal) Value(any) any { return nil }
