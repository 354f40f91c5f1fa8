package memlock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
)

var _ driver.SyncDriver = (*Store)(nil)

// syncs holds a Store's latches and barriers. Its zero value is empty.
type syncs struct {
	mu       sync.Mutex
	latches  map[string]*latch
	barriers map[string]*barrier
	watchers map[string]map[*chan struct{}]struct{}
}

type latch struct {
	n, count int
	expires  time.Time
}

type barrier struct {
	n       int
	open    bool
	parties map[string]time.Time // arrival expiries, by party
}

// NewLatch returns the latch name over store, counting down from count and
// forgotten after ttl without use (see dlock.NewLatch).
func NewLatch(store *Store, name string, count int, ttl time.Duration) (*dlock.Latch, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", driver.ErrInvalid)
	}
	return dlock.NewLatch(store, name, count, ttl)
}

// NewBarrier returns a party's handle on the double barrier name over store,
// for parties parties each present for ttl after its last renewal (see
// dlock.NewBarrier).
func NewBarrier(store *Store, name string, parties int, ttl time.Duration) (*dlock.Barrier, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", driver.ErrInvalid)
	}
	return dlock.NewBarrier(store, name, parties, ttl)
}

// latch returns the live latch name, or nil; s.syn.mu is held.
func (s *Store) latch(name string) *latch {
	l := s.syn.latches[name]
	if l != nil && !s.now().Before(l.expires) {
		delete(s.syn.latches, name)
		return nil
	}
	return l
}

func mismatch(what, name string, stored, n int) error {
	return fmt.Errorf("%w: %s %q made with %d, this one with %d", driver.ErrConflict, what, name, stored, n)
}

// CountDown implements driver.SyncDriver.
func (s *Store) CountDown(_ context.Context, name string, n int, ttl time.Duration) (int, error) {
	s.syn.mu.Lock()
	defer s.syn.mu.Unlock()
	l := s.latch(name)
	if l == nil {
		if s.syn.latches == nil {
			s.syn.latches = map[string]*latch{}
		}
		l = &latch{n: n, count: n}
		s.syn.latches[name] = l
	} else if l.n != n {
		return 0, mismatch("latch", name, l.n, n)
	}
	l.expires = s.now().Add(ttl)
	if l.count > 0 {
		l.count--
		if l.count == 0 {
			s.notify(name)
		}
	}
	return l.count, nil
}

// LatchCount implements driver.SyncDriver.
func (s *Store) LatchCount(_ context.Context, name string, n int, ttl time.Duration) (int, error) {
	s.syn.mu.Lock()
	defer s.syn.mu.Unlock()
	l := s.latch(name)
	if l == nil {
		return n, nil
	}
	if l.n != n {
		return 0, mismatch("latch", name, l.n, n)
	}
	l.expires = s.now().Add(ttl)
	return l.count, nil
}

// barrier returns the barrier name with its lapsed arrivals dropped, or nil
// when it has no party left; s.syn.mu is held.
func (s *Store) barrier(name string) *barrier {
	b := s.syn.barriers[name]
	if b == nil {
		return nil
	}
	now := s.now()
	for p, exp := range b.parties {
		if !now.Before(exp) {
			delete(b.parties, p)
		}
	}
	if len(b.parties) == 0 {
		delete(s.syn.barriers, name)
		return nil
	}
	return b
}

// Arrive implements driver.SyncDriver.
func (s *Store) Arrive(_ context.Context, name, party string, n int, ttl time.Duration) (bool, error) {
	s.syn.mu.Lock()
	defer s.syn.mu.Unlock()
	b := s.barrier(name)
	if b == nil {
		if s.syn.barriers == nil {
			s.syn.barriers = map[string]*barrier{}
		}
		b = &barrier{n: n, parties: map[string]time.Time{}}
		s.syn.barriers[name] = b
	} else if b.n != n {
		return false, mismatch("barrier", name, b.n, n)
	}
	b.parties[party] = s.now().Add(ttl)
	if !b.open && len(b.parties) >= n {
		b.open = true
		s.notify(name)
	}
	return b.open, nil
}

// Withdraw implements driver.SyncDriver.
func (s *Store) Withdraw(_ context.Context, name, party string, n int) (bool, error) {
	s.syn.mu.Lock()
	defer s.syn.mu.Unlock()
	b := s.barrier(name)
	if b == nil {
		return false, nil
	}
	if b.n != n {
		return false, mismatch("barrier", name, b.n, n)
	}
	if b.open {
		return true, nil
	}
	delete(b.parties, party)
	s.barrier(name)
	return false, nil
}

// Depart implements driver.SyncDriver.
func (s *Store) Depart(_ context.Context, name, party string, n int) (int, time.Duration, error) {
	s.syn.mu.Lock()
	defer s.syn.mu.Unlock()
	b := s.barrier(name)
	if b == nil {
		return 0, 0, nil
	}
	if b.n != n {
		return 0, 0, mismatch("barrier", name, b.n, n)
	}
	if _, ok := b.parties[party]; ok {
		delete(b.parties, party)
		if s.barrier(name) == nil {
			s.notify(name)
		}
	}
	var first time.Time
	for _, exp := range b.parties {
		if first.IsZero() || exp.Before(first) {
			first = exp
		}
	}
	lapse := time.Duration(0)
	if !first.IsZero() {
		lapse = first.Sub(s.now())
	}
	return len(b.parties), lapse, nil
}

// WatchSync implements driver.SyncDriver: every change wakes every watcher.
func (s *Store) WatchSync(_ context.Context, name string) (<-chan struct{}, func(), error) {
	s.syn.mu.Lock()
	defer s.syn.mu.Unlock()
	if s.syn.watchers == nil {
		s.syn.watchers = map[string]map[*chan struct{}]struct{}{}
	}
	ws := s.syn.watchers[name]
	if ws == nil {
		ws = map[*chan struct{}]struct{}{}
		s.syn.watchers[name] = ws
	}
	ch := make(chan struct{}, 1)
	ws[&ch] = struct{}{}
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			s.syn.mu.Lock()
			defer s.syn.mu.Unlock()
			delete(ws, &ch)
			if len(ws) == 0 {
				delete(s.syn.watchers, name)
			}
		})
	}, nil
}

// notify wakes every watcher of name; s.syn.mu is held.
func (s *Store) notify(name string) {
	for ch := range s.syn.watchers[name] {
		select {
		case *ch <- struct{}{}:
		default:
		}
	}
}
