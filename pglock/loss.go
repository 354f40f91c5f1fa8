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

// pgHold is a holding of the Driver, watched for a force-unlock.
type pgHold struct {
	driver.LossSignal
	l     *listener
	d     driver.Driver // whose TTL checks it
	key   string
	owner string
	next  *pgHold // the Driver's other holdings of key
	gone  bool
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
	h := &pgHold{l: l, d: d, key: key, owner: owner}
	h.Forgetter = h
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Now().Before(l.refusedUntil) {
		return nil // LISTEN refused: the renewals find a loss
	}
	if l.holds == nil {
		l.holds = map[string]*pgHold{}
	}
	h.next = l.holds[key]
	l.holds[key] = h
	l.nholds++
	l.use()
	if l.heard.Since(key, sent) {
		go h.check()
	}
	return &h.LossSignal
}

// Forget implements driver.Forgetter: the lease has ended.
func (h *pgHold) Forget(*driver.LossSignal) {
	l := h.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if h.gone {
		return
	}
	h.gone = true
	var prev *pgHold
	for x := l.holds[h.key]; x != nil; prev, x = x, x.next {
		if x != h {
			continue
		}
		switch {
		case prev != nil:
			prev.next = h.next
		case h.next != nil:
			l.holds[h.key] = h.next
		default:
			delete(l.holds, h.key)
		}
		break
	}
	l.nholds--
	l.unuse()
}

// lostKey checks the holdings of the key a force-unlock's payload names, if
// payload is one; l.mu is held.
func (l *listener) lostKey(payload string) {
	key, ok := strings.CutPrefix(payload, lostMark)
	if !ok {
		return
	}
	if l.holds[key] == nil {
		l.heard.Add(key)
		return
	}
	for h := l.holds[key]; h != nil; h = h.next {
		go h.check()
	}
}

// checkHolds has every holding registered until now checked once: the
// connection has just started to listen, and a force-unlock before was not
// heard; l.mu is held.
func (l *listener) checkHolds() {
	for _, h := range l.holds {
		for ; h != nil; h = h.next {
			go h.check()
		}
	}
}

// check loses h if the table no longer has it.
func (h *pgHold) check() {
	ctx, cancel := context.WithTimeout(context.Background(), h.l.d.cfg.requestTimeout)
	defer cancel()
	if _, err := h.d.TTL(ctx, driver.Holding{Key: h.key, Owner: h.owner}); errors.Is(err, driver.ErrNotHeld) {
		h.Lose(errForced) // the loss matches ErrNotHeld through ErrLockLost
	}
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
