package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// syncPoll is how often a Latch or Barrier waiter re-reads the store when its
// driver cannot notify it, or after a transient failure.
const syncPoll = 100 * time.Millisecond

// latchRecheck bounds a notified latch waiter's sleep: a notification lost
// with a dropped connection delays it this long at most.
const latchRecheck = 10 * time.Second

// Latch is a countdown latch shared by every process that makes one with the
// same driver's store and name: it starts at a count of n, CountDown lowers the
// count by one (never below zero: counting down an open latch does nothing), and
// Wait returns once the count is zero. Waiters are woken by the store's
// notifications where it has them. A latch that nobody counts down or reads for
// its TTL is forgotten, and starts again from n. It is safe for concurrent use.
type Latch struct {
	d    SyncDriver
	name string
	n    int
	ttl  time.Duration
}

// NewLatch returns the latch name over d, counting down from count, forgotten
// after ttl without use. It returns an error matching ErrInvalid for a nil
// driver, a bad name, a count below 1 or a TTL outside the driver's limits; it
// does no I/O. Backend packages have their own NewLatch over a connection.
func NewLatch(d SyncDriver, name string, count int, ttl time.Duration) (*Latch, error) {
	ttl, err := checkSync(d, name, count, "count", ttl)
	if err != nil {
		return nil, err
	}
	return &Latch{d: d, name: name, n: count, ttl: ttl}, nil
}

// checkSync validates the arguments of NewLatch and NewBarrier and returns the
// TTL normalized to d's limits.
func checkSync(d SyncDriver, name string, n int, what string, ttl time.Duration) (time.Duration, error) {
	if isNil(d) {
		return 0, invalidf("nil sync driver")
	}
	if err := ValidateKey(name); err != nil {
		return 0, err
	}
	if n < 1 {
		return 0, invalidf("%s %d: want at least 1", what, n)
	}
	lim := DefaultTTLLimits
	if l, ok := d.(TTLLimiter); ok {
		lim = l.TTLLimits()
	}
	return lim.Normalize(ttl)
}

// Name returns the latch's name.
func (l *Latch) Name() string { return l.name }

// CountDown lowers the count by one, unless it is zero already, and returns the
// count after it. When it returns an error other than ErrInvalid the count may
// or may not have been lowered (the reply was lost).
func (l *Latch) CountDown(ctx context.Context) (int, error) {
	return l.d.CountDown(ctx, l.name, l.n, l.ttl)
}

// Count returns the current count: zero once the latch is open.
func (l *Latch) Count(ctx context.Context) (int, error) {
	return l.d.LatchCount(ctx, l.name, l.n, l.ttl)
}

// Wait returns nil once the count is zero, or the context's error when ctx ends
// first. Transient store failures (ErrUnavailable) are retried while ctx lives;
// other errors are returned.
func (l *Latch) Wait(ctx context.Context) error {
	return awaitSync(ctx, l.d, l.name, latchRecheck, func(ctx context.Context) (bool, time.Duration, error) {
		n, err := l.d.LatchCount(ctx, l.name, l.n, l.ttl)
		return n == 0, 0, err
	})
}

// awaitSync calls check until it reports done or fails for good: at once, then
// whenever the driver says that name may have changed, after recheck without
// news, and every syncPoll when the driver cannot notify.
// check may shorten the next recheck by returning a positive duration.
func awaitSync(ctx context.Context, d SyncDriver, name string, recheck time.Duration, check func(context.Context) (bool, time.Duration, error)) error {
	wake, cancel, err := d.WatchSync(ctx, name)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		wake, cancel = nil, func() {}
	}
	defer cancel()
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		done, after, err := check(ctx)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err == nil && done:
			return nil
		case err != nil && (!errors.Is(err, ErrUnavailable) || errors.Is(err, ErrRefused)):
			return err
		}
		sleep := recheck
		if after > 0 {
			sleep = min(sleep, after)
		}
		if wake == nil || err != nil {
			sleep = min(syncPoll, recheck)
		}
		timer.Reset(sleep)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case _, ok := <-wake:
			if !ok {
				wake = nil // notifications stopped: poll
			}
			if !timer.Stop() {
				<-timer.C
			}
		case <-timer.C:
		}
	}
}

// Barrier is one party's handle on a double barrier shared by every process
// that makes one with the same driver's store, name and number of parties:
// Enter returns once that many parties have entered, and Leave once every
// party has left. A party's presence is a lease of the barrier's TTL, renewed
// while it waits and between Enter and Leave: a party that dies stops counting
// after the TTL, so that it does not keep the others in Leave forever (and a
// party that dies while the others wait in Enter has to be replaced by another
// before the barrier opens).
//
// The barrier releases all its parties or none: once it opens, every party
// counted to open it is released, even one whose Enter context ended at that
// moment. Parties that enter an open barrier pass at once. A Barrier is used by
// one party at a time: Enter, then Leave, then Enter again for the next round.
type Barrier struct {
	d    SyncDriver
	name string
	n    int
	ttl  time.Duration

	mu    sync.Mutex
	party string        // this party's arrival while entering or inside
	stop  chan struct{} // ends the renewal of the arrival inside the barrier
	done  chan struct{} // closed when the renewal has ended
}

// NewBarrier returns a party's handle on the double barrier name over d, which
// opens for parties parties, each present for ttl after its last renewal. It
// returns an error matching ErrInvalid for a nil driver, a bad name, fewer than
// 1 party or a TTL outside the driver's limits; it does no I/O.
func NewBarrier(d SyncDriver, name string, parties int, ttl time.Duration) (*Barrier, error) {
	ttl, err := checkSync(d, name, parties, "parties", ttl)
	if err != nil {
		return nil, err
	}
	return &Barrier{d: d, name: name, n: parties, ttl: ttl}, nil
}

// Name returns the barrier's name.
func (b *Barrier) Name() string { return b.name }

// Enter announces this party and returns nil once the barrier is open, with
// this party inside until Leave (a goroutine renews its presence until then:
// call Leave). When ctx ends first (or the store fails for
// good) the arrival is taken back, unless the barrier opened meanwhile (Enter
// then returns nil), and Enter returns the error; an arrival that cannot be
// taken back lapses after the TTL. Entering twice without Leave is an error
// matching ErrInvalid.
func (b *Barrier) Enter(ctx context.Context) error {
	b.mu.Lock()
	if b.party != "" {
		b.mu.Unlock()
		return invalidf("barrier %q entered already", b.name)
	}
	party := newOwner()
	b.party = party
	b.mu.Unlock()
	err := awaitSync(ctx, b.d, b.name, b.ttl/3, func(ctx context.Context) (bool, time.Duration, error) {
		open, err := b.d.Arrive(ctx, b.name, party, b.n, b.ttl)
		return open, 0, err
	})
	if err != nil {
		cctx, cancel := CleanupContext(ctx)
		open, werr := b.d.Withdraw(cctx, b.name, party, b.n)
		cancel()
		if werr != nil || !open {
			b.mu.Lock()
			b.party = ""
			b.mu.Unlock()
			return err
		}
	}
	b.mu.Lock()
	b.stop, b.done = make(chan struct{}), make(chan struct{})
	go b.renew(party, b.stop, b.done)
	b.mu.Unlock()
	return nil
}

// renew keeps party's arrival alive until stop is closed.
func (b *Barrier) renew(party string, stop, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(b.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), b.ttl/3)
			_, _ = b.d.Arrive(ctx, b.name, party, b.n, b.ttl)
			cancel()
		}
	}
}

// Leave takes this party out of the barrier and returns nil once every party
// has left (or lapsed: a party that died counts for its TTL). The store is
// told of the departure even when ctx has ended (within CleanupTimeout), so
// that the others do not wait for this party's lease; when it cannot be told,
// the lease lapses after the TTL. When ctx ends before every party has left,
// Leave returns the context's error, with this party out of the barrier. Leaving a barrier
// not entered is an error matching ErrInvalid.
func (b *Barrier) Leave(ctx context.Context) error {
	b.mu.Lock()
	party, stop, done := b.party, b.stop, b.done
	if party == "" || stop == nil {
		b.mu.Unlock()
		return invalidf("barrier %q not entered", b.name)
	}
	b.party, b.stop, b.done = "", nil, nil
	b.mu.Unlock()
	close(stop)
	<-done
	// The departure is told even when ctx has ended (as Unlock does): the
	// others need not wait for this party's lease to lapse.
	cctx, cancel := CleanupContext(ctx)
	n, _, err := b.d.Depart(cctx, b.name, party, b.n)
	cancel()
	if err == nil && n == 0 {
		return nil
	}
	err = awaitSync(ctx, b.d, b.name, b.ttl/3, func(ctx context.Context) (bool, time.Duration, error) {
		n, lapse, err := b.d.Depart(ctx, b.name, party, b.n)
		return n == 0, lapse + time.Millisecond, err
	})
	if err != nil {
		return fmt.Errorf("dlock: leaving barrier %q: %w", b.name, err)
	}
	return nil
}
