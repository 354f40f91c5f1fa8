package pglock

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// Told at once: a force-unlock (ForceUnlock of every lock kind, `dlock unlock
// --force`) sends, after its statement, a NOTIFY on the Driver's channel
// whose payload is lostMark and the key. A Driver that holds locks keeps its
// LISTEN connection (the one its waiters use) while it does, and a holding of
// that key is checked (its TTL statement, owner-checked) and lost at once if
// the table no longer has it (dlock.LossStoreSignal). A notification missed
// while the connection was down, or a row deleted by hand, is found by the
// renewals, as before; a connection that fails while only holders use it is
// set up again at the Driver's next acquisition.

// lostMark starts the payload of a force-unlock's NOTIFY; keys have no
// control characters, so a release's payload (the key) never starts with it.
const lostMark = "\x01"

// errForced is the cause of a force-unlocked holding's loss.
var errForced = errors.New("pglock: the lock was force-unlocked, and the table no longer holds it for this owner")

// initHolds sets up the record of l's holdings told of a force-unlock: a
// check that fails is not retried (the renewals find a loss), and each
// holding counts as a user of the listening connection while it lasts.
func (l *listener) initHolds() {
	l.holds.Cause = errForced // the loss matches ErrNotHeld through ErrLockLost
	l.holds.CheckTimeout = l.d.cfg.requestTimeout
	l.holds.Forgot = func(int) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.nholds--
		l.unuse()
	}
}

// hold registers a holding of key by owner, checked by d's TTL, whose
// acquisition was sent at sent, and returns its Grant.Lost; nil without
// notifications (WithPolling: no LISTEN). A force-unlock of key heard since
// sent, when the Driver held none of it, has the new holding checked: it may
// have come after the grant and before this registration.
func (l *listener) hold(d driver.Driver, key, owner string, sent time.Time) context.Context {
	if l.d.cfg.poll {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Now().Before(l.refusedUntil) {
		return nil // LISTEN refused: the renewals find a loss
	}
	l.nholds++
	l.use()
	return &l.holds.Add(d, key, owner, nil, sent).LossSignal
}

// lostKey checks the holdings of the key a force-unlock's payload names, if
// payload is one; l.mu is held.
func (l *listener) lostKey(payload string) {
	if key, ok := strings.CutPrefix(payload, lostMark); ok {
		l.holds.Suspect(key)
	}
}

// checkHolds has every holding registered until now checked once: the
// connection has just started to listen, and a force-unlock before was not
// heard; l.mu is held.
func (l *listener) checkHolds() {
	l.holds.SuspectAll()
}

// holdersOnly ends run r when only holdings use its connection, which has
// just failed: it is set up again by the Driver's next acquisition (hold),
// not retried for as long as a lease may last, and meanwhile the renewals
// find a loss. It reports whether r ended.
func (l *listener) holdersOnly(r *listenRun) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur != r || l.n != l.nholds {
		return false
	}
	l.cur, l.live = nil, false
	l.gen++
	return true
}

// pushLoss tells the holders of key that a force-unlock removed it; a
// failure is not the force-unlock's (they learn of it at their next renewal).
func (d *Driver) pushLoss(ctx context.Context, key string) {
	if d.cfg.poll {
		return
	}
	_, _ = d.pool.Exec(ctx, "SELECT pg_notify($1, $2)", d.channel, lostMark+key)
}
