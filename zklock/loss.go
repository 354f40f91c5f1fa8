package zklock

import (
	"context"
	"fmt"
	"sync"

	"github.com/dlock-go/dlock/driver"
	"github.com/go-zookeeper/zk"
)

// Told at once: every read of a lock's queue sets a child watch on its lock
// node (getChildren2 with a watch: no request more), so a holder's session is
// told when a node of the queue is made or deleted. When that happens to a
// lock this session holds, the Driver sets an exists watch on the holder's own
// node (one request, once per holding, and only then): a node already gone
// loses the Lease at once, and a deletion later (a force-unlock, any client's
// delete) is told by that watch, with no request. The session's expiry, which
// deletes every node of it, loses them all at once too. Each loss has
// dlock.LossStoreSignal as its Observer's cause.
//
// A watch fires once. The child watch of the grant's last read may have fired
// before the holding was registered: the grant itself changed the queue after
// that read (a lock-delay marker written or a stale one deleted, a duplicate
// node removed), or another client did; the event then found no holding, and
// hold sets the exists watch at once. The exists watch also fires when the
// node is written (a renewal): it is set again then.

// zkHold is a holding of the Driver's session, watched for its node's deletion.
type zkHold struct {
	driver.LossSignal
	d        *Driver
	lp, path string // the lock node, and the holder's node
	stopSess func() bool
	checking bool // an exists watch is being set
	armed    bool // the exists watch is set: the deletion is told
	gone     bool
}

// holdings are the Driver's holdings watched for their deletion.
type holdings struct {
	mu     sync.Mutex
	byLock map[string]*zkHold // by lock node path
	byNode map[string]*zkHold // by the holder's node path
}

// hold registers the holding of node under lp, in the session whose holdings
// end with sess, and returns its Grant.Lost. watch is the child watch of the
// grant's last read of the queue: when it has fired already, its event came
// before the registration, and the exists watch is set now.
func (d *Driver) hold(lp, node string, sess context.Context, watch <-chan zk.Event) *driver.LossSignal {
	h := &zkHold{d: d, lp: lp, path: lp + "/" + node}
	h.Forgetter = h
	hs := &d.holds
	hs.mu.Lock()
	if hs.byLock == nil {
		hs.byLock, hs.byNode = map[string]*zkHold{}, map[string]*zkHold{}
	}
	hs.byLock[lp], hs.byNode[h.path] = h, h
	fired := watch == nil
	select {
	case <-watch:
		fired = true
	default:
	}
	h.checking = fired
	hs.mu.Unlock()
	h.stopSess = context.AfterFunc(sess, func() { h.Lose(context.Cause(sess)) })
	if fired {
		go d.arm(h)
	}
	return &h.LossSignal
}

// Forget implements driver.Forgetter: the lease has ended.
func (h *zkHold) Forget(*driver.LossSignal) {
	h.stopSess()
	h.d.holds.drop(h)
}

// drop unregisters h.
func (hs *holdings) drop(h *zkHold) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	h.gone = true
	if hs.byLock[h.lp] == h {
		delete(hs.byLock, h.lp)
	}
	if hs.byNode[h.path] == h {
		delete(hs.byNode, h.path)
	}
}

// event handles a watch event of the session (on the client's receiving
// goroutine: it must not block).
func (d *Driver) lossEvent(ev zk.Event) {
	hs := &d.holds
	switch ev.Type {
	case zk.EventNodeChildrenChanged:
		hs.mu.Lock()
		h := hs.byLock[ev.Path]
		check := h != nil && !h.armed && !h.checking
		if check {
			h.checking = true
		}
		hs.mu.Unlock()
		if check {
			go d.arm(h)
		}
	case zk.EventNodeDataChanged:
		// The holder's node was written (a renewal): the exists watch has
		// fired, and is set again.
		hs.mu.Lock()
		h := hs.byNode[ev.Path]
		check := h != nil && h.armed && !h.checking
		if check {
			h.armed, h.checking = false, true
		}
		hs.mu.Unlock()
		if check {
			go d.arm(h)
		}
	case zk.EventNodeDeleted:
		hs.mu.Lock()
		h := hs.byNode[ev.Path]
		hs.mu.Unlock()
		if h != nil {
			hs.drop(h)
			h.Lose(deletedErr(h.path))
		}
	}
}

// arm sets the exists watch on h's node, and loses h when the node is gone.
func (d *Driver) arm(h *zkHold) {
	ok, _, _, err := d.conn.ExistsW(h.path)
	hs := &d.holds
	hs.mu.Lock()
	h.checking = false
	h.armed = err == nil && ok
	gone := err == nil && !ok && !h.gone
	hs.mu.Unlock()
	if gone {
		hs.drop(h)
		h.Lose(deletedErr(h.path))
	}
}

func deletedErr(path string) error {
	return fmt.Errorf("zklock: the holder's node %s was deleted (force-unlocked, or deleted by another client)", path)
}
