package etcdlock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// queueEntry is the Handle of an owner's entry in a lock's queue: the holder's
// or a waiter's.
type queueEntry struct {
	entry string

	// lost ends when the shared lease the entry is attached to is gone (and the
	// entry with it): the Grant's loss signal. Nil for an entry read back from
	// the server.
	lost context.Context
	lose context.CancelCauseFunc

	mu    sync.Mutex
	rev   int64            // create revision: the place in the queue and the fencing token
	lease clientv3.LeaseID // the lease the entry is attached to
	secs  int64            // its TTL class in seconds; 0 when unknown
	sl    *sharedLease     // the Driver's lease it is attached to; nil when unknown
	// until is the entry's own deadline: the start of its last write or renewal
	// plus its TTL. Past it, and with no renewal in flight (busy), the Driver
	// removes the entry before it renews the shared lease again.
	until time.Time
	busy  int // renewals of the entry in flight
	// uncertain is set when an attempt of the acquisition failed without a
	// reply that tells what it did: it may still write (see Driver.Abandon).
	uncertain bool
	moved     chan struct{} // closed when rev or ahead changes

	// ahead is what the last attempt read of the entry just older than this
	// one (the predecessor), for the subscription to watch without reading the
	// queue again; nil when unknown.
	ahead *predecessor

	// delayMark is the value of the lock-delay marker a holding with a
	// lock-delay wrote (see gate), "" for none: its release deletes it.
	delayMark string
}

// predecessor is the entry just older than a waiter's, as read at a revision:
// key is empty when nobody was ahead.
type predecessor struct {
	key  string
	rev  int64 // the revision of the read
	gone bool  // the subscription saw it deleted: the waiter may be first now
}

func newQueueEntry(entry string, rev int64, lease clientv3.LeaseID, secs int64) *queueEntry {
	return &queueEntry{entry: entry, rev: rev, lease: lease, secs: secs, moved: make(chan struct{})}
}

// newOwnEntry returns the handle of an entry the Driver has just written on sl,
// with a loss signal.
func newOwnEntry(entry string, rev int64, sl *sharedLease) *queueEntry {
	h := newQueueEntry(entry, rev, sl.id, sl.secs)
	h.lost, h.lose = context.WithCancelCause(context.Background())
	return h
}

func (h *queueEntry) state() (rev int64, lease clientv3.LeaseID, secs int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rev, h.lease, h.secs
}

func (h *queueEntry) shared() *sharedLease {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sl
}

func (h *queueEntry) revision() int64 {
	rev, _, _ := h.state()
	return rev
}

// watchState returns the revision, the predecessor the last attempt read (nil
// when unknown) and a channel closed when either changes.
func (h *queueEntry) watchState() (int64, *predecessor, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rev, h.ahead, h.moved
}

// changed wakes the subscription; h.mu is held.
func (h *queueEntry) changed() {
	close(h.moved)
	h.moved = make(chan struct{})
}

// setAhead records the predecessor an attempt read.
func (h *queueEntry) setAhead(p *predecessor) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ahead = p
	h.changed()
}

// takeOver gives h (a waiter's handle) the place of n, the entry written anew
// for the same owner, and attaches it where n is attached.
func (h *queueEntry) takeOver(n *queueEntry) {
	n.mu.Lock()
	rev, sl, until, ahead := n.rev, n.sl, n.until, n.ahead
	n.mu.Unlock()
	sl.detach(n)
	h.mu.Lock()
	h.rev, h.ahead = rev, ahead
	h.changed()
	h.mu.Unlock()
	if h.lost == nil {
		h.lost, h.lose = n.lost, n.lose
	}
	h.detachAll()
	sl.attach(h, until)
}

// detachAll detaches h from the shared lease it is attached to, if any.
func (h *queueEntry) detachAll() {
	if sl := h.shared(); sl != nil {
		sl.detach(h)
	}
}

// renewing marks a renewal of h in flight (the shared lease's sweep leaves h
// alone meanwhile) and returns its end: done(true, start) records that the
// renewal that started at start succeeded.
func (h *queueEntry) renewing() func(ok bool, start time.Time) {
	h.mu.Lock()
	h.busy++
	h.mu.Unlock()
	return func(ok bool, start time.Time) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.busy--
		if ok && h.secs > 0 {
			h.until = start.Add(seconds(h.secs))
		}
	}
}

// markUncertain records that an attempt of h's acquisition failed without a
// reply that tells what it did.
func (h *queueEntry) markUncertain() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.uncertain = true
}

func (h *queueEntry) isUncertain() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.uncertain
}

// left is the time left until the entry's own deadline, or 0 when unknown.
func (h *queueEntry) left() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.until.IsZero() {
		return 0
	}
	return time.Until(h.until)
}

// entryOf returns the queue entry of hd: its Handle, or when that is nil the
// entry of hd.Owner read from the server (a clean-up after an attempt whose
// reply was lost).
func (d *Driver) entryOf(ctx context.Context, hd driver.Holding) (*queueEntry, error) {
	if err := checkOwner(hd.Owner); err != nil {
		return nil, err
	}
	h, err := handleOf(hd.Handle)
	if err != nil || h != nil {
		return h, err
	}
	entry := EntryKey(hd.Key, hd.Owner)
	resp, err := d.cli.Get(ctx, entry)
	if err != nil {
		return nil, mapErr(err)
	}
	if len(resp.Kvs) == 0 {
		return nil, notHeld(hd.Key)
	}
	kv := resp.Kvs[0]
	if foreign(kv) {
		return nil, conflict(hd.Key, kv)
	}
	return newQueueEntry(entry, kv.CreateRevision, clientv3.LeaseID(kv.Lease), 0), nil
}

func handleOf(v any) (*queueEntry, error) {
	if v == nil {
		return nil, nil
	}
	h, ok := v.(*queueEntry)
	if !ok || h == nil {
		return nil, fmt.Errorf("%w: handle of type %T is not an etcdlock handle", driver.ErrInvalid, v)
	}
	return h, nil
}
