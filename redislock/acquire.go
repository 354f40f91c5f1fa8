package redislock

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// The acquisition of every lock kind takes the same steps: a waiting attempt
// takes its ticket from the wake-up hub, the kind's script runs with its keys
// and arguments, its reply is decoded, the hub learns the outcome, and a busy
// reply to a waiter that left state in the store (a queue entry, a mark) says
// how soon to refresh it. Each kind describes its script call in an
// acquisition; acquire does the rest.

// acquisition is one lock kind's part of an attempt. (The plain mutex, whose
// waiters queue behind this process's earlier waiters of the key and report
// arrivals and tokens to the hub, takes these steps itself: see
// Driver.Acquire.)
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

// acquire makes one attempt of r as a describes it.
func (c *conn) acquire(ctx context.Context, r driver.AcquireRequest, a acquisition) (driver.Grant, error) {
	t := ticket{done: func(error, string, uint64) {}}
	if r.Waiting {
		t = c.hub.attempt(ctx, a.channel, r.Owner, false)
		if t.queued > 0 {
			// Other waiters of this process came first: wait for a wake in turn.
			return driver.Grant{}, &driver.Taken{Remaining: t.queued}
		}
	}
	sent := time.Now()
	rctx, stop := graced(ctx)
	res, err := a.run(rctx, t)
	stop()
	if err != nil {
		err = c.notSent(err, time.Since(sent))
	}
	g, _, err := a.decode(ctx, r, res, err)
	t.done(err, "", 0)
	var busy *driver.Taken
	if a.refresh > 0 && r.Waiting && errors.As(err, &busy) {
		queued(busy, a.refresh)
	}
	c.fl.sent(r, err)
	if err == nil && a.holder != nil {
		g.Lost = &c.hub.holding(a.holder, r.Key, r.Owner, g.Handle, sent).LossSignal
	}
	return g, err
}

// decode decodes the reply of a's script: a grant, the arrival it carries, or
// the attempt's error.
func (a acquisition) decode(ctx context.Context, r driver.AcquireRequest, res []any, err error) (driver.Grant, string, error) {
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
