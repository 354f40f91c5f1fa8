package zklock

import (
	"context"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// waiter is what the Driver knows of the node one owner (one waiting
// acquisition) has in a lock's queue, kept from one attempt to the next so that
// a later attempt neither creates a node again nor reads what it knows: the
// node's name, its czxid (the token it would be granted), its session, and when
// and with which TTL it was last written. The fields above mu belong to the
// acquisition's attempts, which the Client makes one at a time; the watch of
// the node's predecessor is shared with the subscription's goroutine.
type waiter struct {
	node       string
	czxid      int64         // 0 when unknown (a node found in the queue)
	session    int64         // 0 when unknown
	written    time.Time     // local start of the call that last wrote the node; zero when unknown
	writtenTTL time.Duration // the TTL that write gave the node

	mu      sync.Mutex
	watch   *predWatch    // the watch on the node's predecessor; nil when none is set
	changed chan struct{} // closed (and replaced) whenever watch changes
}

// predWatch is a watch on the node just before a waiter's: a data watch (GetW),
// set on the holder, whose data and stat it keeps (renewals change them and the
// watch is set again), or a child watch (ChildrenW) on another waiter, which a
// rewrite of that waiter's node does not fire. Both fire when the node is
// deleted.
type predWatch struct {
	path  string // the predecessor's path
	name  string // the predecessor's name
	data  bool   // a data watch: nd and st are the predecessor's current data
	nd    nodeData
	st    *zk.Stat
	ch    <-chan zk.Event
	fired bool // the watch has ended: the predecessor changed in a way that needs a new attempt
}

// waiterMargin is how much longer than its TTL a waiting attempt's node lives
// by its data: a waiter that becomes first holds the lock on the node's last
// write, which is at most this much older than its attempt (waiters rewrite
// their node every waiterMargin/2). The default watchdog renews every third
// of the TTL, so a holder that dies before its first renewal blocks the lock no
// longer than one that dies just after it.
func waiterMargin(ttl time.Duration) time.Duration { return ttl / 3 }

func newWaiter(node string) *waiter { return &waiter{node: node, changed: make(chan struct{})} }

// lost forgets the waiter's node (gone: deleted as dead, or with its session).
func (w *waiter) lost() {
	w.node, w.czxid, w.session, w.written, w.writtenTTL = "", 0, 0, time.Time{}, 0
	w.setWatch(nil)
}

// wrote records a write of the node that started at start with ttl.
func (w *waiter) wrote(start time.Time, ttl time.Duration, st *zk.Stat) {
	w.written, w.writtenTTL = start, ttl
	if st != nil {
		w.czxid, w.session = st.Czxid, st.EphemeralOwner
	}
}

// covers reports whether the node's last write keeps it alive, by its data, at
// least ttl from start: the waiter can take the lock without writing it again.
func (w *waiter) covers(start time.Time, ttl time.Duration) bool {
	return w.czxid != 0 && w.session != 0 && !w.written.IsZero() && !w.written.Add(w.writtenTTL).Before(start.Add(ttl))
}

// setWatch replaces the waiter's watch and wakes the subscription's goroutine.
func (w *waiter) setWatch(pw *predWatch) {
	w.mu.Lock()
	w.watch = pw
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
}

// liveWatch returns the waiter's watch on the predecessor named name, if it is
// set and has not fired; an event already in its channel is taken into account
// (without setting the watch again: the caller does that).
func (w *waiter) liveWatch(name string) *predWatch {
	w.mu.Lock()
	pw := w.watch
	w.mu.Unlock()
	if pw == nil || pw.name != name {
		return nil
	}
	select {
	case ev := <-pw.ch:
		w.fire(pw, ev)
	default:
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if pw.fired || w.watch != pw {
		return nil
	}
	return pw
}

// fire records that pw ended with ev; a child watch that reports a data change
// (it cannot) and a data watch's data change both end it too when the caller
// does not set it again.
func (w *waiter) fire(pw *predWatch, _ zk.Event) {
	w.mu.Lock()
	if w.watch == pw && !pw.fired {
		pw.fired = true
		close(w.changed)
		w.changed = make(chan struct{})
	}
	w.mu.Unlock()
}

// subscribe starts the goroutine that wakes the waiter w (see Subscribe).
func (d *Driver) subscribe(ctx context.Context, w *waiter) (<-chan struct{}, func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	wake := make(chan struct{}, 1)
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.watchPred(wctx, w, wake)
	}()
	var once sync.Once
	cancel := func() {
		once.Do(func() {
			stop()
			<-done
		})
	}
	return wake, cancel, nil
}

// watchPred waits on the watch the waiter's attempts set on its predecessor,
// and sends on wake when the predecessor is deleted (the waiter may be first
// now), or the watch ends otherwise (the session expired or is closing), so
// that the waiter makes its next attempt. A data change of the holder (a
// renewal) sets the data watch again without a wake. It returns when ctx ends.
func (d *Driver) watchPred(ctx context.Context, w *waiter, wake chan<- struct{}) {
	notify := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	for {
		w.mu.Lock()
		pw, changed := w.watch, w.changed
		w.mu.Unlock()
		var ch <-chan zk.Event
		if pw != nil && !pw.fired {
			ch = pw.ch
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
			continue
		case ev := <-ch:
			if ev.Type == zk.EventNodeDataChanged && pw.data && d.rewatch(ctx, w, pw) {
				continue
			}
			w.fire(pw, ev)
			notify()
		}
	}
}

// rewatch sets the data watch pw again after a change of the predecessor's
// data, and keeps the new data; it reports false when the predecessor is gone
// or cannot be read.
func (d *Driver) rewatch(ctx context.Context, w *waiter, pw *predWatch) bool {
	var data []byte
	var st *zk.Stat
	var ch <-chan zk.Event
	err := d.call(ctx, func() (err error) {
		data, st, ch, err = d.conn.GetW(pw.path)
		return err
	})
	if err != nil {
		return false
	}
	nd, _ := decodeData(data)
	w.mu.Lock()
	if w.watch == pw {
		pw.nd, pw.st, pw.ch = nd, st, ch
	}
	w.mu.Unlock()
	return true
}

// watchPredecessor sets a watch on pred, the node just before w's in the queue
// at lp: a data watch when pred is the holder (head), a child watch otherwise.
// It returns nil when pred is gone already.
func (d *Driver) watchPredecessor(ctx context.Context, lp string, w *waiter, pred child, head bool) (*predWatch, error) {
	pw := &predWatch{path: lp + "/" + pred.name, name: pred.name, data: head}
	err := d.call(ctx, func() (err error) {
		if head {
			var data []byte
			data, pw.st, pw.ch, err = d.conn.GetW(pw.path)
			pw.nd, _ = decodeData(data)
			return err
		}
		_, pw.st, pw.ch, err = d.conn.ChildrenW(pw.path)
		return err
	})
	if isNoNode(err) {
		return nil, nil
	}
	if err != nil {
		return nil, mapErr(err)
	}
	w.setWatch(pw)
	return pw, nil
}

// waiterOf returns the waiter of owner under lp, or nil.
func (d *Driver) waiterOf(k ownerKey) *waiter {
	d.waitersMu.Lock()
	defer d.waitersMu.Unlock()
	return d.waiters[k]
}

// keepWaiter records w as owner's waiter under lp.
func (d *Driver) keepWaiter(k ownerKey, w *waiter) {
	d.waitersMu.Lock()
	d.waiters[k] = w
	d.waitersMu.Unlock()
}

// dropWaiter forgets owner's waiter under lp: its acquisition has ended.
func (d *Driver) dropWaiter(k ownerKey) {
	d.waitersMu.Lock()
	delete(d.waiters, k)
	d.waitersMu.Unlock()
}

// predData returns the predecessor's data and stat as pw last read them.
func (w *waiter) predData(pw *predWatch) (nodeData, *zk.Stat) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return pw.nd, pw.st
}
