// Package memlock is an in-memory dlock backend: the same Locker, Lease, fencing
// tokens, expiry, waiting and inspection as the network backends, inside one
// process. It is meant for the unit tests of code that takes dlock locks: give
// each simulated process its own Client over one shared Store, and the code under
// test meets the same behaviour (busy errors, expiry, loss, tokens) as on Redis,
// with no server to run.
//
//	store := memlock.NewStore()
//	a, _ := memlock.New(store) // "process" A
//	b, _ := memlock.New(store) // "process" B
//
// It guarantees exclusion within the process, with leases that expire on the
// monotonic clock, strictly increasing fencing tokens per key, owner-checked
// release and extend, and waiters woken by the release (in arrival order, one at
// a time). It does not survive the process, and it is not distributed: a Store
// is not a lock service. Its code is also the worked example of a dlock backend
// in docs/backends.md.
package memlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
)

// Store holds the locks of every Client made over it. It is a driver.Driver, a
// driver.Notifier, a driver.Abandoner and a driver.Inspector. The zero value is not
// usable; create it with NewStore. It is safe for concurrent use.
type Store struct {
	mu      sync.Mutex
	locks   map[string]*holding             // by key, while held (expired ones are removed lazily)
	last    map[string]uint64               // the newest token handed out, by key
	waiters map[string][]*waiter            // by key, in arrival order
	gone    map[string]map[string]time.Time // abandoned owners, by key, until when
	delayed map[string]time.Time            // keys in their lock-delay, until when
	results map[string]result               // Once's results, by key
	now     func() time.Time
	syn     syncs // latches and barriers (sync.go)
}

type holding struct {
	owner   string
	token   uint64
	meta    string
	expires time.Time
	delay   time.Duration           // the lock-delay after an end without a release
	lost    context.CancelCauseFunc // ends the holding's Grant.Lost
	lostCtx context.Context
}

// errForced is the cause of the Grant.Lost of a holding that ForceUnlock removed.
var errForced = errors.New("memlock: the store says the lock was force-unlocked")

type waiter struct {
	owner string
	wake  chan struct{}
}

var (
	_ driver.Driver     = (*Store)(nil)
	_ driver.Notifier   = (*Store)(nil)
	_ driver.Abandoner  = (*Store)(nil)
	_ driver.Inspector  = (*Store)(nil)
	_ driver.TTLLimiter = (*Store)(nil)

	_ driver.LockDelayer  = (*Store)(nil)
	_ driver.Resumer      = (*Store)(nil)
	_ driver.ResultKeeper = (*Store)(nil)
)

// result is a value stored with PutResult.
type result struct {
	value   []byte
	expires time.Time
}

// maxResult is the largest result a Store keeps.
const maxResult = 64 << 20

// PutResult implements driver.ResultKeeper.
func (s *Store) PutResult(_ context.Context, h driver.Holding, value []byte, ttl time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur := s.live(h.Key); cur == nil || cur.owner != h.Owner {
		return notHeld(h.Key)
	}
	if len(value) > maxResult {
		return fmt.Errorf("%w: memlock: a result of %d bytes, more than %d", driver.ErrInvalid, len(value), maxResult)
	}
	s.results[h.Key] = result{value: append([]byte(nil), value...), expires: s.now().Add(ttl)}
	return nil
}

// GetResult implements driver.ResultKeeper.
func (s *Store) GetResult(_ context.Context, key string) ([]byte, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.results[key]
	if !ok {
		return nil, false, nil
	}
	if !s.now().Before(r.expires) {
		delete(s.results, key)
		return nil, false, nil
	}
	return append([]byte(nil), r.value...), true, nil
}

// MaxResult implements driver.ResultKeeper.
func (s *Store) MaxResult() int { return maxResult }

// NewStore returns an empty Store.
func NewStore() *Store {
	return &Store{
		locks:   map[string]*holding{},
		last:    map[string]uint64{},
		waiters: map[string][]*waiter{},
		gone:    map[string]map[string]time.Time{},
		delayed: map[string]time.Time{},
		results: map[string]result{},
		now:     time.Now,
	}
}

// Client is the dlock.Client that New returns: a dlock.Locker over a Store, and
// a driver.Inspector through it.
type Client = dlock.Client

// New returns a Client over store with opts as the defaults of every call. It
// returns an error matching dlock.ErrInvalid for a nil store or a bad option.
func New(store *Store, opts ...dlock.Option) (*Client, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", driver.ErrInvalid)
	}
	return dlock.NewClient(store, opts...)
}

// TTLLimits implements driver.TTLLimiter: the defaults of every dlock backend.
func (s *Store) TTLLimits() driver.TTLLimits { return driver.DefaultTTLLimits }

// MaxLockDelay implements driver.LockDelayer.
func (s *Store) MaxLockDelay() time.Duration { return driver.MaxLockDelay }

// live returns the holding of key if it has not expired; s.mu is held. An
// expired holding with a lock-delay leaves the key in its delay.
func (s *Store) live(key string) *holding {
	h := s.locks[key]
	if h != nil && !s.now().Before(h.expires) {
		delete(s.locks, key)
		if h.delay > 0 {
			s.delayed[key] = h.expires.Add(h.delay)
			return nil
		}
		s.wakeOne(key) // an expiry frees the lock as a release does
		return nil
	}
	return h
}

// delayLeft returns the time left of key's lock-delay, 0 when it has none;
// s.mu is held.
func (s *Store) delayLeft(key string) time.Duration {
	until, ok := s.delayed[key]
	if !ok {
		return 0
	}
	left := until.Sub(s.now())
	if left <= 0 {
		delete(s.delayed, key)
		return 0
	}
	return left
}

// Acquire implements driver.Driver.
func (s *Store) Acquire(_ context.Context, r driver.AcquireRequest) (driver.Grant, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if until, ok := s.gone[r.Key][r.Owner]; ok && now.Before(until) {
		return driver.Grant{}, fmt.Errorf("%w: the acquisition was abandoned", driver.ErrNotObtained)
	}
	if h := s.live(r.Key); h != nil {
		if h.owner == r.Owner { // a retry of the holder: the same holding
			h.expires = now.Add(r.TTL)
			return driver.Grant{Token: h.token, TTL: r.TTL, Lost: h.lostCtx}, nil
		}
		return driver.Grant{}, &driver.Taken{Remaining: h.expires.Sub(now)}
	}
	if left := s.delayLeft(r.Key); left > 0 {
		// Nobody wakes a waiter at the delay's end: it sleeps until then.
		return driver.Grant{}, &driver.Taken{Remaining: left}
	}
	token := max(s.last[r.Key]+1, uint64(now.UnixMicro()))
	s.last[r.Key] = token
	h := &holding{owner: r.Owner, token: token, meta: r.Metadata, expires: now.Add(r.TTL), delay: r.Delay}
	h.lostCtx, h.lost = context.WithCancelCause(context.Background())
	s.locks[r.Key] = h
	return driver.Grant{Token: token, TTL: r.TTL, Lost: h.lostCtx}, nil
}

// Info implements driver.Driver: a mutex in this process's memory.
func (s *Store) Info() driver.DriverInfo {
	return driver.DriverInfo{Backend: "memlock", Kind: driver.KindMutex}
}

// Extend implements driver.Driver.
func (s *Store) Extend(_ context.Context, h driver.Holding, ttl time.Duration) (time.Duration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.live(h.Key)
	if cur == nil || cur.owner != h.Owner {
		return 0, notHeld(h.Key)
	}
	cur.expires = s.now().Add(ttl)
	return ttl, nil
}

// Resume implements driver.Resumer: the holding of h.Owner with token, if it
// is still there, extended to h.TTL.
func (s *Store) Resume(_ context.Context, h driver.Holding, token uint64) (driver.Grant, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.live(h.Key)
	if cur == nil || cur.owner != h.Owner || cur.token != token {
		return driver.Grant{}, notHeld(h.Key)
	}
	cur.expires = s.now().Add(h.TTL)
	return driver.Grant{Token: cur.token, TTL: h.TTL, Lost: cur.lostCtx}, nil
}

// Release implements driver.Driver.
func (s *Store) Release(_ context.Context, h driver.Holding) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.live(h.Key)
	if cur == nil || cur.owner != h.Owner {
		return notHeld(h.Key)
	}
	s.free(h.Key)
	return nil
}

// free removes key's holding and wakes a waiter; s.mu is held.
func (s *Store) free(key string) {
	delete(s.locks, key)
	s.wakeOne(key)
}

// TTL implements driver.Driver.
func (s *Store) TTL(_ context.Context, h driver.Holding) (time.Duration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.live(h.Key)
	if cur == nil || cur.owner != h.Owner {
		return 0, notHeld(h.Key)
	}
	return cur.expires.Sub(s.now()), nil
}

// Subscribe implements driver.Notifier: a release (or an expiry noticed by any
// call) wakes the waiter that has waited longest.
func (s *Store) Subscribe(_ context.Context, h driver.Holding) (<-chan struct{}, func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := &waiter{owner: h.Owner, wake: make(chan struct{}, 1)}
	s.waiters[h.Key] = append(s.waiters[h.Key], w)
	var once sync.Once
	return w.wake, func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			ws := s.waiters[h.Key]
			for i, x := range ws {
				if x == w {
					ws = append(ws[:i], ws[i+1:]...)
					break
				}
			}
			if len(ws) == 0 {
				delete(s.waiters, h.Key)
			} else {
				s.waiters[h.Key] = ws
			}
			select {
			case <-w.wake: // a wake it never used goes to the next waiter
				s.wakeOne(h.Key)
			default:
			}
		})
	}, nil
}

// wakeOne wakes the longest waiting waiter of key without a wake pending; s.mu
// is held.
func (s *Store) wakeOne(key string) {
	for _, w := range s.waiters[key] {
		select {
		case w.wake <- struct{}{}:
			return
		default:
		}
	}
}

// abandonFor is how long a Store refuses the attempts of an abandoned owner, at
// least: the acquisition's TTL if that is longer.
const abandonFor = time.Minute

// Abandon implements driver.Abandoner: it releases the owner's holding, if any,
// and refuses the owner's later attempts on the key for a minute or the
// acquisition's TTL, whichever is longer.
func (s *Store) Abandon(_ context.Context, h driver.Holding) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur := s.live(h.Key); cur != nil && cur.owner == h.Owner {
		s.free(h.Key)
	}
	now := s.now()
	for key, owners := range s.gone { // forget marks that have run out
		for o, until := range owners {
			if !now.Before(until) {
				delete(owners, o)
			}
		}
		if len(owners) == 0 {
			delete(s.gone, key)
		}
	}
	if s.gone[h.Key] == nil {
		s.gone[h.Key] = map[string]time.Time{}
	}
	s.gone[h.Key][h.Owner] = now.Add(max(h.TTL, abandonFor))
	return nil
}

// Inspect implements driver.Inspector.
func (s *Store) Inspect(_ context.Context, key string) (driver.LockInfo, error) {
	if err := driver.ValidateKey(key); err != nil {
		return driver.LockInfo{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.info(key), nil
}

// info describes key; s.mu is held.
func (s *Store) info(key string) driver.LockInfo {
	info := driver.LockInfo{Key: key, LastToken: s.last[key], Waiters: len(s.waiters[key])}
	if h := s.live(key); h != nil {
		info.Held, info.Owner, info.Token, info.Metadata = true, h.owner, h.token, h.meta
		info.TTL = h.expires.Sub(s.now())
		info.Holders, info.Limit, info.Kind = 1, 1, driver.KindMutex
	} else {
		info.DelayLeft = s.delayLeft(key)
	}
	return info
}

// ListPrefix implements driver.Inspector.
func (s *Store) ListPrefix(_ context.Context, prefix string) ([]driver.LockInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, 0, len(s.locks)+len(s.delayed))
	for key := range s.locks {
		keys = append(keys, key)
	}
	for key := range s.delayed {
		if _, held := s.locks[key]; !held {
			keys = append(keys, key)
		}
	}
	var out []driver.LockInfo
	for _, key := range keys {
		if info := s.info(key); (info.Held || info.DelayLeft > 0) && strings.HasPrefix(key, prefix) {
			out = append(out, info)
		}
	}
	return out, nil
}

// ForceUnlock implements driver.Inspector. The holder's lease is lost at once
// (driver.Grant.Lost), with dlock.LossStoreSignal as its Observer's cause.
func (s *Store) ForceUnlock(_ context.Context, key string) (driver.LockInfo, error) {
	if err := driver.ValidateKey(key); err != nil {
		return driver.LockInfo{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	info := s.info(key)
	if !info.Held {
		return info, fmt.Errorf("%w: %q is free", driver.ErrNotHeld, key)
	}
	s.locks[key].lost(errForced) // the holder is told at once
	if h := s.locks[key]; h.delay > 0 {
		delete(s.locks, key)
		s.delayed[key] = s.now().Add(h.delay)
		return info, nil
	}
	s.free(key)
	return info, nil
}

func notHeld(key string) error {
	return fmt.Errorf("%w: %q is not held by this owner", driver.ErrNotHeld, key)
}
