package etcdlock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// queueEntry is the Handle of an owner's entry in a lock's queue: the holder's
// or a waiter's.
type queueEntry struct {
	entry string

	mu    sync.Mutex
	rev   int64            // create revision: the place in the queue and the fencing token
	lease clientv3.LeaseID // the entry's lease
	asked int64            // the TTL the lease was asked for, in seconds; 0 when unknown
	moved chan struct{}    // closed when rev changes (the entry was written anew)

	// The start of the last grant or renewal of the lease that succeeded, and
	// the TTL it granted: the lease lives at least that long from then.
	renewed time.Time
	granted int64
}

func newQueueEntry(entry string, rev int64, lease clientv3.LeaseID, asked int64) *queueEntry {
	return &queueEntry{entry: entry, rev: rev, lease: lease, asked: asked, moved: make(chan struct{})}
}

func (h *queueEntry) state() (rev int64, lease clientv3.LeaseID, asked int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rev, h.lease, h.asked
}

// replace takes over the state of n, a new entry written for the same owner.
func (h *queueEntry) replace(n *queueEntry) {
	rev, lease, asked := n.state()
	n.mu.Lock()
	renewed, granted := n.renewed, n.granted
	n.mu.Unlock()
	h.set(rev, lease, asked)
	h.renewal(renewed, granted)
}

// renewal records a grant or renewal of the lease that started at start.
func (h *queueEntry) renewal(start time.Time, granted int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.renewed, h.granted = start, granted
}

// left is the lease time left that the last renewal guarantees, or 0.
func (h *queueEntry) left() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.renewed.IsZero() {
		return 0
	}
	return seconds(h.granted) - time.Since(h.renewed)
}

func (h *queueEntry) revision() int64 {
	rev, _, _ := h.state()
	return rev
}

// watchState returns the revision and a channel closed when it changes.
func (h *queueEntry) watchState() (int64, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rev, h.moved
}

func (h *queueEntry) set(rev int64, lease clientv3.LeaseID, asked int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if rev != h.rev {
		close(h.moved)
		h.moved = make(chan struct{})
	}
	h.rev, h.lease, h.asked = rev, lease, asked
}

// entryOf returns the queue entry of hd: its Handle, or when that is nil the
// entry of hd.Owner read from the server (a clean-up after an attempt whose
// reply was lost).
func (d *Driver) entryOf(ctx context.Context, hd dlock.Holding) (*queueEntry, error) {
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
		return nil, fmt.Errorf("%w: handle of type %T is not an etcdlock handle", dlock.ErrInvalid, v)
	}
	return h, nil
}
