package redislock

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// The acquisition of every lock kind takes the same steps (acquire): a
// waiting attempt takes its ticket from the wake-up hub, the kind's script runs
// with its keys and arguments, its reply is decoded, the hub learns the
// outcome, a busy reply to a waiter that left state in the store (a queue
// entry, a mark) says how soon to refresh it, the abandon bookkeeping learns
// whether the attempt was answered, and a grant is registered to be told of a
// loss at once. Each kind describes its part in an attempter: the plain mutex
// (Driver, allocation-free) and the other kinds (acquisition).

// attempter is one lock kind's part of an attempt.
type attempter interface {
	// ticket takes a waiting attempt's ticket from the wake-up hub h.
	ticket(ctx context.Context, h *hub, r driver.AcquireRequest) ticket
	// call runs the kind's script for the attempt with ticket t (the zero
	// ticket for an attempt that does not wait).
	call(ctx context.Context, r driver.AcquireRequest, t ticket) reply
	// grant turns call's reply into the attempt's grant (with its Handle),
	// the arrival the reply gives this process, or the attempt's error.
	grant(ctx context.Context, r driver.AcquireRequest, rep reply) (driver.Grant, string, error)
	// refreshEvery, when positive, is how often a waiter that was told busy
	// must come back to refresh the state it left in the store (see queued).
	refreshEvery() time.Duration
	// lossHolder is the driver whose TTL checks a holding the server may have
	// removed (see loss.go); nil for none.
	lossHolder() driver.Driver
}

// reply is what an attempt's script call returned.
type reply struct {
	res   any
	acked int64  // the replicas that acknowledged the call, when the kind asks (WAIT)
	keys  string // the plain mutex's waiting set key, which its Handle keeps
	err   error
}

// acquire makes one attempt of r as k describes it.
func (c *conn) acquire(ctx context.Context, r driver.AcquireRequest, k attempter) (driver.Grant, error) {
	var t ticket
	if r.Waiting {
		t = k.ticket(ctx, c.hub, r)
		if t.queued > 0 {
			// Other waiters of this process came first: wait for a wake in turn.
			return driver.Grant{}, &driver.Taken{Remaining: t.queued}
		}
	}
	sent := time.Now()
	rctx, stop := graced(ctx)
	rep := k.call(rctx, r, t)
	stop()
	if rep.err != nil {
		rep.err = c.notSent(rep.err, time.Since(sent))
	}
	g, arrival, err := k.grant(ctx, r, rep)
	if t.done != nil {
		t.done(err, arrival, g.Token)
	}
	if every := k.refreshEvery(); every > 0 && r.Waiting && err != nil {
		refreshing(err, every)
	}
	c.fl.sent(r, err)
	if err != nil {
		return driver.Grant{}, err
	}
	if holder := k.lossHolder(); holder != nil {
		g.Lost = &c.hub.holding(holder, r.Key, r.Owner, g.Handle, sent).LossSignal
	}
	return g, nil
}

// acquisition is the part of an attempt of the kinds other than the plain
// mutex, described by its script call.
type acquisition struct {
	channel string // the wake channel the waiter listens on
	// run runs the kind's script for the attempt with ticket t (the zero
	// ticket for an attempt that does not wait).
	run func(ctx context.Context, t ticket) ([]any, error)
	// refused turns a kind's own refusal reply into its error, or returns nil.
	refused func(res []any, err error) error
	// extra is true when a grant's reply may carry a third element: the
	// process's arrival (plain mutex) or the hold count (reentrant).
	extra bool
	// refresh, when positive, is how often a waiter that was told busy must
	// come back to refresh the state it left in the store (see queued).
	refresh time.Duration
	// holder is the driver whose TTL checks a holding the server may have
	// removed (see loss.go).
	holder driver.Driver
}

func (a *acquisition) ticket(ctx context.Context, h *hub, r driver.AcquireRequest) ticket {
	return h.attempt(ctx, a.channel, r.Owner, false)
}

func (a *acquisition) call(ctx context.Context, _ driver.AcquireRequest, t ticket) reply {
	res, err := a.run(ctx, t)
	return reply{res: res, err: err}
}

func (a *acquisition) grant(ctx context.Context, r driver.AcquireRequest, rep reply) (driver.Grant, string, error) {
	s, _ := rep.res.([]any)
	return a.decode(ctx, r, s, rep.err)
}

func (a *acquisition) refreshEvery() time.Duration { return a.refresh }

func (a *acquisition) lossHolder() driver.Driver { return a.holder }

// decode decodes the reply of a's script: a grant, the arrival it carries, or
// the attempt's error.
func (a *acquisition) decode(ctx context.Context, r driver.AcquireRequest, res []any, err error) (driver.Grant, string, error) {
	if a.refused != nil {
		if rerr := a.refused(res, err); rerr != nil {
			return driver.Grant{}, "", rerr
		}
	}
	arrival := ""
	if a.extra && err == nil && len(res) == 3 {
		arrival, _ = res[2].(string)
		res = res[:2]
	}
	g, err := acquireReply(res, err, r.TTL)
	return g, arrival, err
}

// refreshing marks err, when it is a busy reply, as the reply to a waiter
// that left state in the store which it must refresh every every (see queued).
func refreshing(err error, every time.Duration) {
	var busy *driver.Taken
	if errors.As(err, &busy) {
		queued(busy, every)
	}
}

// queued marks busy as the reply to a waiter that left state in the store (a
// queue entry, a mark) which it must refresh at least every refresh, and which
// the Client abandons if it gives up.
func queued(busy *driver.Taken, refresh time.Duration) {
	busy.Queued = true
	if busy.Remaining < 0 || busy.Remaining > refresh {
		busy.Remaining = refresh
	}
}

// waitingArg is the acquire scripts' argument that says whether the caller
// will wait: "1" or "0".
func waitingArg(r driver.AcquireRequest) string {
	if r.Waiting {
		return "1"
	}
	return "0"
}

// abandoned is the result of a release script run to abandon an acquisition:
// finding nothing held is no error.
func abandoned(err error) error {
	if errors.Is(err, driver.ErrNotHeld) {
		return nil
	}
	return err
}
