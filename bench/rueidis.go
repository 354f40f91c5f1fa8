package main

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
)

// rueidisVariant is rueidis's rueidislock on the bench's Redis: a Locker (a
// rueidis client of its own, with its client-side caching connection) per
// contender, one key per lock (KeyMajority 1), its defaults otherwise (5s
// validity extended every 2.5s) but for TryNextAfter. Waiters are woken by the
// invalidation of the key they wait for. TryNextAfter (default 20ms) bounds
// each acquire request, and an acquire cut short by it waits for an
// invalidation that may never come: on this loaded machine a 20ms stall then
// hangs a contender for good, so it is 2s here.
var rueidisVariant = variant{name: "rueidis", lib: "rueidis", peer: true, in: inA | inB,
	desc: "rueidis rueidislock v1.0.79, a Locker (rueidis client) per contender, KeyMajority 1, NoLoopTracking, TryNextAfter 2s; defaults otherwise (5s validity, extended every 2.5s; waiters woken by client-side caching invalidations)",
	open: func(o opening) (locker, error) { return &rueidisLocker{addr: o.rdb.Options().Addr}, nil }}

// rueidisLocker makes a rueidislock Locker per mutex (per contender), and
// closes them all.
type rueidisLocker struct {
	addr string
	mu   sync.Mutex
	all  []rueidislock.Locker
	err  error
}

func (r *rueidisLocker) mutex(key string) mutex {
	l, err := rueidislock.NewLocker(rueidislock.LockerOption{
		ClientOption:   rueidis.ClientOption{InitAddress: []string{r.addr}},
		KeyMajority:    1,
		NoLoopTracking: true,
		TryNextAfter:   2 * time.Second,
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.err = errors.Join(r.err, err)
		return &rueidisMutex{err: err}
	}
	r.all = append(r.all, l)
	return &rueidisMutex{l: l, key: key}
}

func (*rueidisLocker) notified() bool { return true }

// Close implements io.Closer.
func (r *rueidisLocker) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range r.all {
		l.Close()
	}
	r.all = nil
	return nil
}

type rueidisMutex struct {
	l      rueidislock.Locker
	key    string
	err    error // the Locker could not be made
	cancel context.CancelFunc
}

// lock waits for the lock while ctx lasts. rueidislock holds a lock while the
// context it was taken with lasts, and ctx only bounds the wait here: the lock
// is taken with a context of its own, which ctx cancels only until the lock
// is held.
func (m *rueidisMutex) lock(ctx context.Context) error {
	if m.err != nil {
		return m.err
	}
	hold, release := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, release)
	_, cancel, err := m.l.WithContext(hold, m.key)
	if err == nil && !stop() {
		cancel() // ctx ended as the lock was taken: it is released
		err = ctx.Err()
	}
	if err != nil {
		release()
		if ctx.Err() != nil || errors.Is(err, rueidislock.ErrNotLocked) {
			return errors.Join(errNotObtained, err)
		}
		return err
	}
	m.cancel = func() { cancel(); release() }
	return nil
}

// unlock releases the lock: rueidislock's cancel deletes the key and returns
// once it is deleted.
func (m *rueidisMutex) unlock(context.Context) error {
	cancel := m.cancel
	m.cancel = nil
	if cancel == nil {
		return errors.New("rueidis: unlock without a lock")
	}
	cancel()
	return nil
}
