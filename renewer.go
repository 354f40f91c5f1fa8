package dlock

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// The renewer: one per Client, it renews every renewing lease of the Client in
// rounds, each a goroutine while its round trip lasts. Leases wait in a queue
// ordered by their next renewal; when the first is due, every lease due within
// a slack of it (an eighth of its renewal interval) rides along, and the whole
// round goes to the driver as one ExtendMany (BatchExtender), or as one Extend
// per lease. Each lease keeps its own outcome, local deadline, retry and events:
// a refused entry loses its lease alone, and a round trip that fails is a
// transient failure of each lease it carried, retried within that lease's
// validity.

const (
	// roundMax bounds the leases of one renewal round.
	roundMax = 1024
	// roundsMax bounds the rounds in flight at once: a round that hangs (a
	// server that stopped answering) does not hold up the others.
	roundsMax = 8
	// extendWorkers bounds the Extend calls in flight at once, over every
	// round, for a driver without ExtendMany.
	extendWorkers = 32
)

// renewEntry is a lease's place in its renewer, guarded by the renewer's mu.
type renewEntry struct {
	due      time.Time
	idx      int                // position in the queue; -1 when not queued
	ended    bool               // removed: never queued again
	unlocked bool               // removed by Unlock: the outcome of a round in flight is dropped
	applying chan struct{}      // closed once the outcome of its round being applied is; nil when none
	rd       *round             // the round in flight that carries it; nil when none
	cancel   context.CancelFunc // cancels its own Extend in flight (drivers without ExtendMany)
}

// round is one set of renewals sent together.
type round struct {
	live   int // leases of the round not removed yet
	cancel context.CancelFunc
}

// renewer renews a Client's leases; see above. It has no goroutine of its own:
// a timer starts the rounds when the first lease is due, and each round runs in
// a goroutine while its round trip lasts.
type renewer struct {
	c       *Client
	mu      sync.Mutex
	q       renewQueue
	timer   *time.Timer   // runs run when the first lease is due; nil until needed
	rounds  int           // rounds in flight
	extends chan struct{} // one token per Extend in flight (drivers without ExtendMany)
}

func newRenewer(c *Client) *renewer {
	return &renewer{c: c, extends: make(chan struct{}, extendWorkers)}
}

// schedule arms the timer for the first lease in the queue, or stops it when
// there is none (or too many rounds are in flight: the end of one schedules
// again); rn.mu is held.
func (rn *renewer) schedule() {
	if len(rn.q) == 0 || rn.rounds >= roundsMax {
		if rn.timer != nil {
			rn.timer.Stop()
		}
		return
	}
	d := time.Until(rn.q[0].re.due)
	if rn.timer == nil {
		rn.timer = time.AfterFunc(d, rn.run)
		return
	}
	rn.timer.Reset(d)
}

// add queues l's next renewal at due.
func (rn *renewer) add(l *Lease, due time.Time) {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	if l.re.ended {
		return
	}
	l.re.due = due
	heap.Push(&rn.q, l)
	if l.re.idx == 0 {
		rn.schedule()
	}
}

// remove takes l out of the renewer for good: out of the queue, and out of a
// round in flight (which is cancelled once none of its leases is left). With
// unlock (Unlock), the outcome of a round in flight is dropped, unless it is
// being applied already (see settled).
func (rn *renewer) remove(l *Lease, unlock bool) {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	if unlock {
		l.re.unlocked = true
	}
	if l.re.ended {
		return
	}
	l.re.ended = true
	if l.re.idx >= 0 {
		head := l.re.idx == 0
		heap.Remove(&rn.q, l.re.idx)
		if head {
			rn.schedule()
		}
	}
	if unlock && l.re.cancel != nil {
		l.re.cancel()
	}
	if rd := l.re.rd; rd != nil {
		l.re.rd = nil
		if rd.live--; rd.live == 0 {
			rd.cancel()
		}
	}
}

// run starts the rounds that are due, each in a goroutine of its own, and arms
// the timer for the next.
func (rn *renewer) run() {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	for len(rn.q) > 0 && rn.rounds < roundsMax {
		now := time.Now()
		if rn.q[0].re.due.After(now) {
			break
		}
		ctx, cancel := context.WithCancel(context.Background())
		rd := &round{cancel: cancel}
		var ls []*Lease
		for len(rn.q) > 0 && len(ls) < roundMax {
			l := rn.q[0]
			if l.re.due.After(now.Add(l.renewEvery / 8)) {
				break
			}
			heap.Pop(&rn.q)
			l.re.rd = rd
			ls = append(ls, l)
		}
		rd.live = len(ls)
		rn.rounds++
		go rn.renew(ctx, rd, ls)
	}
	rn.schedule()
}

// pending is one lease's renewal in a round.
type pending struct {
	l         *Lease
	ttl       time.Duration
	deadline  time.Time
	bootStart time.Duration
}

// renew runs one round: it renews the leases ls, which rd carries, under ctx.
func (rn *renewer) renew(ctx context.Context, rd *round, ls []*Lease) {
	defer func() {
		rd.cancel()
		rn.mu.Lock()
		rn.rounds--
		rn.schedule()
		rn.mu.Unlock()
	}()
	ps := make([]pending, 0, len(ls))
	for _, l := range ls {
		ttl, ok := l.renewTTL()
		if !ok {
			rn.done(l, rd, 0, true) // the MaxHold cap: the lease runs out at its TTL
			continue
		}
		if !l.extendMu.TryLock() {
			// The holder's own Extend is in flight: try again shortly.
			l.mu.Lock()
			deadline := l.deadline
			l.mu.Unlock()
			next, stop := l.retryIn(deadline)
			rn.done(l, rd, next, stop)
			continue
		}
		if l.check() != nil { // lost or unlocked meanwhile
			l.extendMu.Unlock()
			rn.done(l, rd, 0, true)
			continue
		}
		ps = append(ps, pending{l: l, ttl: ttl})
	}
	if len(ps) == 0 {
		return
	}
	started := time.Now()
	var last time.Time
	for i := range ps {
		p := &ps[i]
		p.bootStart, _ = p.l.boot()
		p.deadline = p.l.renewBegin(started, p.bootStart, p.ttl)
		if p.deadline.After(last) {
			last = p.deadline
		}
	}
	// Each lease's deadline timer reports a loss at its own deadline; the
	// round waits for its reply no longer than the last of them.
	ctx, cancel := context.WithDeadline(ctx, last)
	defer cancel()
	rn.extend(ctx, ps, func(i int, r driver.ExtendResult) { rn.apply(rd, started, ps[i], r) })
}

// apply applies the outcome r of p's renewal in round rd, which started at
// started: the lease's extendMu has been released, so that the holder's own
// Extend may go on (it starts after this round's reply, and so lands after it:
// an outcome applied late never overrides its; see Lease.extended), and an
// Observer told of the outcome may extend any lease (one whose renewal is still
// in flight once that renewal has returned).
func (rn *renewer) apply(rd *round, started time.Time, p pending, r driver.ExtendResult) {
	rn.mu.Lock()
	drop := p.l.re.unlocked
	var applied chan struct{} // only an Observer's events are waited for
	if !drop && p.l.obs != nil {
		applied = make(chan struct{})
		p.l.re.applying = applied
	}
	p.l.re.cancel = nil
	rn.mu.Unlock()
	if drop {
		rn.done(p.l, rd, 0, true)
		return
	}
	next, stop := p.l.renewEnd(started, p.bootStart, p.deadline, p.ttl, r)
	rn.mu.Lock()
	if applied != nil {
		p.l.re.applying = nil
		close(applied)
	}
	rn.mu.Unlock()
	rn.done(p.l, rd, next, stop)
}

// settled waits until the outcome of a renewal of l that is being applied, and
// told to l's Observer, has been, or until ctx ends: an Unlock that tells the
// release waits for the renewal told before it, but no longer than its caller
// allows (a Renewal hook that blocks must not hold up Unlock).
func (rn *renewer) settled(ctx context.Context, l *Lease) {
	rn.mu.Lock()
	applying := l.re.applying
	rn.mu.Unlock()
	if applying == nil {
		return
	}
	select {
	case <-applying:
	case <-ctx.Done():
	}
}

// done ends l's part in round rd, and queues its next renewal in next unless stop.
func (rn *renewer) done(l *Lease, rd *round, next time.Duration, stop bool) {
	rn.mu.Lock()
	if l.re.rd == rd {
		l.re.rd = nil
		rd.live--
	}
	rn.mu.Unlock()
	if !stop {
		rn.add(l, time.Now().Add(next))
	}
}

// extend sends the renewals of a round, releases each lease's extendMu and
// calls apply with its outcome: one ExtendMany when the driver has it (every
// extendMu released before the first outcome is applied), otherwise one Extend
// per lease (a few at a time), each bounded by its lease's deadline, whose
// outcome is applied as soon as it has returned and every Extend of the round
// has started, so that a renewal that hangs holds up no other lease's.
func (rn *renewer) extend(ctx context.Context, ps []pending, apply func(int, driver.ExtendResult)) {
	reqs := make([]driver.ExtendRequest, len(ps))
	for i, p := range ps {
		reqs[i] = driver.ExtendRequest{Holding: p.l.holding(p.ttl), TTL: p.ttl}
	}
	if be, ok := rn.c.d.(driver.BatchExtender); ok {
		res := be.ExtendMany(ctx, reqs)
		if len(res) != len(reqs) {
			err := fmt.Errorf("%w: the driver's ExtendMany returned %d results for %d renewals", ErrUnavailable, len(res), len(reqs))
			res = make([]driver.ExtendResult, len(reqs))
			for i := range res {
				res[i].Err = err
			}
		}
		for _, p := range ps {
			p.l.extendMu.Unlock()
		}
		for i, r := range res {
			apply(i, r)
		}
		return
	}
	res := make([]driver.ExtendResult, len(reqs))
	returned := make(chan int, len(reqs)) // the renewals whose outcome is in res
	for i := range reqs {
		select {
		case rn.extends <- struct{}{}:
		case <-ctx.Done():
			res[i].Err = ctx.Err()
			ps[i].l.extendMu.Unlock()
			returned <- i
			continue
		}
		go func() {
			defer func() { <-rn.extends }() // last: at most extendWorkers goroutines
			res[i] = rn.extendOne(ctx, ps[i].l, ps[i].deadline, reqs[i])
			ps[i].l.extendMu.Unlock()
			returned <- i
		}()
	}
	// Every Extend has started: an Observer told of one outcome that extends
	// another lease of the round waits for that lease's renewal at most.
	for range reqs {
		i := <-returned
		apply(i, res[i])
	}
}

// extendOne is one Extend of a round, cancelled when l is unlocked.
func (rn *renewer) extendOne(ctx context.Context, l *Lease, deadline time.Time, r driver.ExtendRequest) driver.ExtendResult {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	rn.mu.Lock()
	if l.re.unlocked {
		rn.mu.Unlock()
		return driver.ExtendResult{Err: context.Canceled}
	}
	l.re.cancel = cancel
	rn.mu.Unlock()
	ttl, err := rn.c.d.Extend(ctx, r.Holding, r.TTL)
	return driver.ExtendResult{TTL: ttl, Err: err}
}

// renewQueue is a heap of leases by next renewal.
type renewQueue []*Lease

func (q renewQueue) Len() int           { return len(q) }
func (q renewQueue) Less(i, j int) bool { return q[i].re.due.Before(q[j].re.due) }
func (q renewQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].re.idx, q[j].re.idx = i, j
}

func (q *renewQueue) Push(x any) {
	l := x.(*Lease)
	l.re.idx = len(*q)
	*q = append(*q, l)
}

func (q *renewQueue) Pop() any {
	old := *q
	n := len(old)
	l := old[n-1]
	old[n-1] = nil
	l.re.idx = -1
	*q = old[:n-1]
	return l
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

// observeRenewal tells the lease's observer of a renewal that started at
// started, with the local deadline then at deadline, and ended with err.
func (l *Lease) observeRenewal(started, deadline time.Time, err error) {
	l.mu.Lock()
	octx := l.obs.ctx
	l.mu.Unlock()
	l.obs.o.Renewal(octx, RenewalEvent{Target: l.obs.t, Margin: deadline.Sub(started),
		Duration: time.Since(started), Err: err})
}
