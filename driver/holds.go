package driver

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Holds is the record a driver keeps of its process's holdings, by key, so
// that a holder is told at once when its lock is taken from it: when the store
// pushes a message that a key may be gone (a force-unlock's notification, a
// keyspace event), Suspect has each holding of that key checked with the store
// (the driver's TTL, owner-checked), and a holding the store no longer has is
// lost at once (its LossSignal). Messages name no holding, so none is lost
// without that check.
//
// A message about a key this process holds none of is remembered (see Heard):
// a holding whose acquisition was sent before it may have been forced between
// its grant and its registration, and is checked when it registers.
//
// Set the exported fields before the first Add; a Holds is safe for
// concurrent use after that and must not be copied.
type Holds struct {
	// Cause is the error a holding the store no longer has is lost with; it
	// should match ErrNotHeld (the loss matches ErrLockLost in any case).
	Cause error
	// CheckTimeout bounds the check of a key's holdings after a message; 0
	// means five seconds.
	CheckTimeout time.Duration
	// Retry, when set, reports whether a check that failed with err is tried
	// again (with a backoff, within CheckTimeout); without it a check that
	// fails is not retried, and the holding learns of a loss at its next
	// renewal.
	Retry func(err error) bool
	// Stop, when set, returns a channel closed when the messages that asked
	// for a check stop (the driver's subscription closed): its retries stop.
	// A nil channel means they have stopped already: no retry.
	Stop func() <-chan struct{}
	// Forgot, when set, is called after a holding is forgotten, with how many
	// are left, outside the registry's lock.
	Forgot func(left int)

	mu       sync.Mutex
	m        map[string]*Held
	n        int
	checking map[string]bool // keys whose holdings are being checked: again when true
	heard    Heard
}

// Held is one holding in a Holds: its Grant.Lost is &Held.LossSignal.
type Held struct {
	LossSignal
	holds  *Holds
	d      Driver // whose TTL checks it
	key    string
	owner  string
	handle any
	next   *Held // the other holdings of the same key
	gone   bool
}

// Add registers the holding of key by owner (with the driver's handle), whose
// acquisition was sent at sent, checked with d's TTL, and returns it. A
// message about key heard since sent, while the process held none of it, has
// the new holding checked at once.
func (s *Holds) Add(d Driver, key, owner string, handle any, sent time.Time) *Held {
	h := &Held{holds: s, d: d, key: key, owner: owner, handle: handle}
	h.Forgetter = h
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]*Held{}
	}
	h.next = s.m[key]
	s.m[key] = h
	s.n++
	if s.heard.Since(key, sent) {
		s.suspect(key)
	}
	return h
}

// Forget implements Forgetter: the lease of h has ended.
func (h *Held) Forget(*LossSignal) {
	s := h.holds
	s.mu.Lock()
	if h.gone {
		s.mu.Unlock()
		return
	}
	h.gone = true
	var prev *Held
	for x := s.m[h.key]; x != nil; prev, x = x, x.next {
		if x != h {
			continue
		}
		switch {
		case prev != nil:
			prev.next = h.next
		case h.next != nil:
			s.m[h.key] = h.next
		default:
			delete(s.m, h.key)
		}
		break
	}
	s.n--
	left := s.n
	s.mu.Unlock()
	if s.Forgot != nil {
		s.Forgot(left)
	}
}

// Len returns how many holdings are registered.
func (s *Holds) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// Suspect has the holdings of key checked, unless a check of them is under
// way (it checks again when done). A message about a key held by none here is
// remembered for a while (see Add).
func (s *Holds) Suspect(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.suspect(key)
}

// SuspectAll has every holding registered until now checked once: the
// driver has just (re)started to listen, and a message sent before was not
// heard.
func (s *Holds) SuspectAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key := range s.m {
		s.suspect(key)
	}
}

// suspect is Suspect; s.mu is held.
func (s *Holds) suspect(key string) {
	if s.m[key] == nil {
		s.heard.Add(key)
		return
	}
	if s.checking == nil {
		s.checking = map[string]bool{}
	}
	if _, busy := s.checking[key]; busy {
		s.checking[key] = true
		return
	}
	s.checking[key] = false
	go s.check(key)
}

// check checks this process's holdings of key with the store, and loses those
// it no longer has; failures are tried again as Retry and Stop allow.
func (s *Holds) check(key string) {
	timeout := s.CheckTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	for {
		s.mu.Lock()
		var hs []*Held
		for h := s.m[key]; h != nil; h = h.next {
			hs = append(hs, h)
		}
		s.mu.Unlock()
		var stop <-chan struct{}
		retry := s.Retry != nil
		if s.Stop != nil {
			stop = s.Stop()
			retry = retry && stop != nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		for pause := 10 * time.Millisecond; len(hs) > 0; pause = min(2*pause, 500*time.Millisecond) {
			var failed []*Held
			for _, h := range hs {
				_, err := h.d.TTL(ctx, Holding{Key: h.key, Owner: h.owner, Handle: h.handle})
				switch {
				case errors.Is(err, ErrNotHeld):
					h.Lose(s.Cause)
				case err != nil && retry && s.Retry(err) && !h.forgotten():
					failed = append(failed, h)
				}
			}
			hs = failed
			if len(hs) == 0 || !pauseFor(ctx, stop, pause) {
				break
			}
		}
		cancel()
		s.mu.Lock()
		if !s.checking[key] {
			delete(s.checking, key)
			s.mu.Unlock()
			return
		}
		s.checking[key] = false
		s.mu.Unlock()
	}
}

// forgotten reports whether the lease of h has ended.
func (h *Held) forgotten() bool {
	h.holds.mu.Lock()
	defer h.holds.mu.Unlock()
	return h.gone
}

// pauseFor waits d, and reports false if ctx ended or stop was closed first.
func pauseFor(ctx context.Context, stop <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-stop:
		return false
	case <-t.C:
		return true
	}
}
