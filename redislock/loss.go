package redislock

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// Told at once: a holder learns that its lock was taken from it as soon as the
// server says so, not at its next renewal. Each hub keeps, while this process
// holds locks, one subscription connection of its own (apart from the wake-ups',
// so that an ACL refusal of one does not stop the other), subscribed to
//
//   - lossChannel, on which dlock's force-unlock paths (Inspector.ForceUnlock,
//     a Client's ForceUnlock, `dlock unlock --force`) publish the lock's name,
//     and
//   - on a single server or a Sentinel master, with one PSUBSCRIBE, the
//     keyspace notifications of the lock keys of its database
//     ("__keyspace@DB__:dlock:{*}"; dropped when an ACL refuses it), which the
//     server sends only when notify-keyspace-events enables them (K and g, x or
//     e, for a deletion, an expiry or an eviction); dlock never changes the
//     server's configuration.
//
// A message about a lock this process holds makes the hub check each of its
// holdings of it (one owner-checked read each, the driver's TTL), and a holding
// the server no longer has is lost at once (dlock.LossStoreSignal). Messages
// name no holding, so none is lost without that check: a message that was sent
// before a holding began (a release by the previous holder, read late) costs a
// read and nothing else. A message missed while the connection was down is not
// replayed, but each time the connection is subscribed (at first, and again
// after it dropped) the holdings registered until then are checked once, so
// that a force-unlock that came before the subscription is found too. RESP3
// client tracking was not chosen: it tells of every write to a tracked key
// (every renewal of every holder), not of deletions, and would cost a read per
// renewal.

// lossChannel is the channel on which force-unlocks publish the name of the
// lock they removed (a plain PUBLISH, which reaches every node of a Cluster).
const lossChannel = Prefix + "lost"

// lossCheckTimeout bounds the check of a lock's holdings after a message.
const lossCheckTimeout = 5 * time.Second

// errPushed is the cause of a loss pushed by the server.
var errPushed = errors.New("redislock: the server said the lock was removed (force-unlocked, deleted, expired or evicted), and it no longer holds it for this owner")

// initHolds sets up the record of h's holdings watched for pushed losses: a
// check that fails (the server is unreachable, a Cluster slot moves) is tried
// again while the loss subscription lasts and the client is open, and the
// subscription lingers a while after the last holding ends, so that a process
// that takes locks one after the other keeps it.
func (h *hub) initHolds() {
	h.holds.Cause = errPushed // the loss matches ErrNotHeld through ErrLockLost
	h.holds.CheckTimeout = lossCheckTimeout
	h.holds.Retry = func(err error) bool { return !closedErr(err) }
	h.holds.Stop = func() <-chan struct{} {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.loss == nil {
			return nil
		}
		return h.loss.stop
	}
	h.holds.Forgot = func(left int) {
		h.mu.Lock()
		defer h.mu.Unlock()
		if left == 0 && h.loss != nil {
			h.lingerLoss(h.loss)
		}
	}
}

// lossWatch is a hub's loss subscription.
type lossWatch struct {
	ps     Subscription
	idle   *time.Timer
	closed bool
	stop   chan struct{} // closed when it is: the checks it started stop retrying
	// kick cuts short the wait before subscribing again after a dropped
	// connection: a new holding was just granted, so the server answers.
	kick chan struct{}
	// want is how many subscriptions it makes (the loss channel, and the
	// keyspace pattern when there is one), confirmed how many confirmations
	// it has had (again after a dropped connection); h.mu guards them.
	want, confirmed int
}

// end marks w closed; h.mu is held.
func (w *lossWatch) end() {
	if !w.closed {
		w.closed = true
		close(w.stop)
	}
}

// holding registers a new holding of d, whose acquisition was sent at sent,
// and returns its Grant.Lost (see driver.Holds).
func (h *hub) holding(d driver.Driver, key, owner string, handle any, sent time.Time) *driver.Held {
	if h.w.ring() {
		return &driver.Held{} // no single subscription: the renewals find a loss
	}
	hd := h.holds.Add(d, key, owner, handle, sent)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.watchLosses()
	return hd
}

// lingerLoss closes the loss subscription w idleLinger after the last holding
// ended, unless a holding begins before; h.mu is held.
func (h *hub) lingerLoss(w *lossWatch) {
	if w.idle != nil {
		w.idle.Reset(idleLinger)
		return
	}
	w.idle = time.AfterFunc(idleLinger, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.holds.Len() == 0 && h.loss == w {
			h.closeLoss()
		}
	})
}

// watchLosses opens the loss subscription if it is not open; h.mu is held.
func (h *hub) watchLosses() {
	if w := h.loss; w != nil {
		if w.idle != nil {
			w.idle.Stop()
		}
		select {
		case w.kick <- struct{}{}:
		default:
		}
		return
	}
	if time.Now().Before(h.lossRefusedTill) {
		return
	}
	pattern := ""
	if db, ok := h.w.keyspaceDB(); ok && !h.lossNoKeyspace {
		pattern = keyspacePrefix(db) + Prefix + "{*}"
	}
	w := &lossWatch{ps: h.w.subscribe(), stop: make(chan struct{}), kick: make(chan struct{}, 1), want: 1}
	if pattern != "" {
		w.want = 2
	}
	h.loss = w
	go h.receiveLosses(w, pattern)
}

// keyspacePrefix starts the keyspace notification channels of database db.
func keyspacePrefix(db int) string { return "__keyspace@" + strconv.Itoa(db) + "__:" }

// closeLoss closes the loss subscription; h.mu is held.
func (h *hub) closeLoss() {
	w := h.loss
	if w == nil {
		return
	}
	h.loss = nil
	w.end()
	if w.idle != nil {
		w.idle.Stop()
	}
	go w.ps.Close()
}

// receiveLosses subscribes w to lossChannel and, unless it is "", to the
// keyspace notifications' pattern, and dispatches its messages until it is
// closed.
func (h *hub) receiveLosses(w *lossWatch, pattern string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	err := w.ps.Subscribe(ctx, lossChannel)
	if err == nil && pattern != "" {
		err = w.ps.PSubscribe(ctx, pattern)
	}
	cancel()
	backoff := 10 * time.Millisecond
	for {
		var msg Push
		if err == nil {
			msg, err = w.ps.Receive(context.Background())
		}
		h.mu.Lock()
		if w.closed {
			h.mu.Unlock()
			return
		}
		switch {
		case closedErr(err):
			h.loss = nil
			w.end()
			h.mu.Unlock()
			_ = w.ps.Close() // a Transport's subscription may outlive its client's close
			return
		case err != nil && refusal(err) && pattern != "":
			// An ACL that allows dlock's channels but not the keyspace
			// notifications': subscribe again without them.
			h.lossNoKeyspace = true
			h.closeLoss()
			if h.holds.Len() > 0 {
				h.watchLosses()
			}
			h.mu.Unlock()
			return
		case err != nil && refusal(err):
			slog.Warn("redislock: the server refused the subscription that tells holders of a forced unlock at once; they learn of it at their next renewal (check the ACL's channel permissions)", "err", err)
			h.lossRefusedTill = time.Now().Add(refusedRetry)
			h.closeLoss()
			h.mu.Unlock()
			return
		case err != nil:
			// Dropped: go-redis subscribes again on the next Receive, after
			// a backoff that a new holding cuts short (its grant says that
			// the server answers again: a holding told of nothing until the
			// backoff ran out would miss a force-unlock meanwhile).
			h.mu.Unlock()
			select { // a kick from before the drop says nothing of now
			case <-w.kick:
			default:
			}
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
				backoff = min(2*backoff, time.Second)
			case <-w.kick:
				t.Stop()
				backoff = 10 * time.Millisecond
			case <-w.stop:
				t.Stop()
			}
			err = nil
			continue
		}
		backoff = 10 * time.Millisecond
		switch m := msg; m.Kind {
		case "message":
			if key, ok := h.lossKey(m); ok {
				h.holds.Suspect(key)
			}
		default:
			// Subscribed (first, or again after a dropped connection): a
			// message sent before this was not heard, so the holdings
			// registered until now are checked once.
			if m.Kind == "subscribe" || m.Kind == "psubscribe" {
				w.confirmed++
				h.holds.SuspectAll()
			}
		}
		h.mu.Unlock()
	}
}

// lossKey returns the name of the lock that m says may be gone.
func (h *hub) lossKey(m Push) (string, bool) {
	if m.Channel == lossChannel {
		return m.Payload, m.Payload != ""
	}
	switch m.Payload {
	case "del", "expired", "evicted":
	default:
		return "", false
	}
	_, redisKey, ok := strings.Cut(m.Channel, "__:")
	if !ok {
		return "", false
	}
	return lockName(redisKey)
}

// pushLoss tells the holders of the lock named key, in every process, that
// it was force-unlocked (see lossChannel). A failure is not the
// force-unlock's: its holders learn of it at their next renewal.
func (c *conn) pushLoss(ctx context.Context, key string) {
	if c.w.ring() {
		return
	}
	_ = c.w.publish(ctx, lossChannel, key)
}
