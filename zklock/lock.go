package zklock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/go-zookeeper/zk"
)

// maxRounds bounds the list/create rounds of one Acquire: a round is repeated
// only when a node it read went away in between.
const maxRounds = 5

// TTLLimits implements driver.TTLLimiter: TTLs from dlock.MinTTL to the
// negotiated session timeout, in whole milliseconds (see the package
// documentation).
func (d *Driver) TTLLimits() driver.TTLLimits {
	return driver.TTLLimits{Min: driver.MinTTL, Max: d.SessionTimeout(), Step: time.Millisecond}
}

// checkTTL checks ttl against the limits once more: the session timeout can
// change at a reconnect.
func (d *Driver) checkTTL(ttl time.Duration) error {
	if lim := d.TTLLimits(); ttl < lim.Min || ttl > lim.Max {
		return fmt.Errorf("%w: ttl %v outside [%v, %v] (the ZooKeeper session timeout bounds the TTL)", driver.ErrInvalid, ttl, lim.Min, lim.Max)
	}
	return nil
}

func (d *Driver) checkArgs(key, owner string) error {
	if d == nil {
		return fmt.Errorf("%w: nil driver", driver.ErrInvalid)
	}
	if err := driver.ValidateKey(key); err != nil {
		return err
	}
	return checkOwner(owner)
}

// list returns the queue of the lock at lp (empty when the lock node is missing).
func (d *Driver) list(ctx context.Context, lp string) ([]child, error) {
	q, _, err := d.listMarked(ctx, lp)
	return q, err
}

// listMarked is list, also reporting the lock-delay marker (see gate).
func (d *Driver) listMarked(ctx context.Context, lp string) ([]child, bool, error) {
	q, marked, _, err := d.listWatched(ctx, lp)
	return q, marked, err
}

// listWatched is listMarked, also returning the event channel of the child
// watch the read set (see loss.go).
func (d *Driver) listWatched(ctx context.Context, lp string) ([]child, bool, <-chan zk.Event, error) {
	var names []string
	var ev <-chan zk.Event
	err := d.call(ctx, func() (err error) {
		names, _, ev, err = d.conn.ChildrenW(lp) // the watch tells a holder of a deletion (see loss.go)
		return err
	})
	if err != nil {
		q, marked, err := parseList(lp, nil, err) // names may still be written: the call ended early
		return q, marked, nil, err
	}
	q, marked, err := parseList(lp, names, nil)
	return q, marked, ev, err
}

// parseList is the outcome of listMarked from the reply to the read.
func parseList(lp string, names []string, err error) ([]child, bool, error) {
	if errors.Is(err, zk.ErrNoNode) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, mapErr(err)
	}
	return queue(lp, names)
}

// createAndList creates owner's node (see create) and reads the queue after
// it. The read goes out as soon as the create has been written to the server,
// without waiting for its reply: the server answers the requests of a session
// in the order they come, so the read sees the new node, and the two take one
// round trip. A read that does not show the node went out before it was made
// (the lock node was missing, and the create was made again) or after it was
// gone: the queue is read again. The result has a name when the node was made
// (err is then the read's), and the event channel of the read's child watch.
func (d *Driver) createAndList(ctx context.Context, lp, owner string, data []byte) (created, []child, bool, <-chan zk.Event, error) {
	type listed struct {
		q      []child
		marked bool
		ev     <-chan zk.Event
		err    error
	}
	written, forget := d.wire.expect(lp + "/" + childPrefix + owner + "-")
	defer forget()
	done := make(chan struct{})
	lc := make(chan listed, 1)
	go func() {
		select {
		case <-written:
		case <-done:
			lc <- listed{err: errNotSent}
			return
		}
		// The call ends when the server answers or the connection drops; the
		// caller waits for it only as long as ctx lets it.
		names, _, ev, err := d.conn.ChildrenW(lp) // see loss.go
		q, marked, err := parseList(lp, names, err)
		lc <- listed{q, marked, ev, err}
	}()
	c, err := d.create(ctx, lp, owner, data)
	close(done)
	var l listed
	select {
	case l = <-lc:
	case <-ctx.Done():
		l.err = ctx.Err()
	}
	if err != nil {
		return created{}, nil, false, nil, err
	}
	if l.err == nil && index(l.q, c.name) >= 0 {
		return c, l.q, l.marked, l.ev, nil
	}
	q, marked, ev, err := d.listWatched(ctx, lp)
	return c, q, marked, ev, err
}

// errNotSent is the outcome of a read of the queue that was not made.
var errNotSent = errors.New("zklock: not sent")

// created is a node that create made.
type created struct {
	name    string
	czxid   int64 // 0 when unknown
	session int64 // 0 when unknown
}

// create makes owner's ephemeral sequential node under lp, creating the lock
// node (and the root) as container nodes when missing. It learns the node's
// czxid in the same request: the create goes in a multi with an empty write of
// the clock node (see clockNode), whose new mzxid is the multi's zxid, which is
// the child's czxid. Where the session may not write the clock node, a plain
// create does, and the czxid is read later.
func (d *Driver) create(ctx context.Context, lp, owner string, data []byte) (created, error) {
	for round := 0; ; round++ {
		if d.testHookCreate != nil {
			d.testHookCreate()
		}
		sid := d.conn.SessionID()
		plain := d.plainCreate.Load()
		var path string
		var czxid int64
		err := d.ownerCall(ctx, lp, owner, func() error {
			if plain {
				var err error
				path, err = d.conn.Create(lp+"/"+childPrefix+owner+"-", data, zk.FlagEphemeralSequential, d.acl)
				return err
			}
			res, err := d.conn.Multi(
				&zk.CreateRequest{Path: lp + "/" + childPrefix + owner + "-", Data: data, Acl: d.acl, Flags: zk.FlagEphemeralSequential},
				&zk.SetDataRequest{Path: d.clockPath(), Data: nil, Version: -1})
			if err != nil {
				if len(res) == 2 && !errors.Is(res[0].Error, zk.ErrNoNode) && errors.Is(res[1].Error, zk.ErrNoNode) {
					return errNoClock
				}
				if len(res) == 2 && errors.Is(res[1].Error, zk.ErrNoAuth) {
					return zk.ErrNoAuth
				}
				return err
			}
			if len(res) != 2 || res[1].Stat == nil {
				return fmt.Errorf("zklock: unexpected multi reply %+v", res)
			}
			path, czxid = res[0].String, res[1].Stat.Mzxid
			return nil
		})
		if err == nil {
			c := created{name: path[len(lp)+1:], czxid: czxid}
			if czxid != 0 && sid != 0 && d.conn.SessionID() == sid {
				c.session = sid
			}
			return c, nil
		}
		switch {
		case round >= maxRounds:
			return created{}, mapErr(err)
		case errors.Is(err, zk.ErrNoAuth) && !plain:
			// The clock node is not ours to write: nothing was created.
			d.plainCreate.Store(true)
		case errors.Is(err, errNoClock):
			if err := d.makeClock(ctx); err != nil {
				return created{}, err
			}
		case errors.Is(err, zk.ErrNoNode):
			// The lock node is missing (never made, or a container the server
			// removed): make it, and try again.
			if err := d.makePath(ctx, lp); err != nil {
				return created{}, err
			}
		default:
			return created{}, mapErr(err)
		}
	}
}

// errNoClock says that a create failed because the clock node is missing.
var errNoClock = errors.New("zklock: no clock node")

// clockNode is the name of a node under the root that every create writes
// (nothing) in the same transaction, for the transaction's zxid. No key
// escapes to it: escape writes '%' only before two hex digits.
const clockNode = "%clock"

func (d *Driver) clockPath() string {
	if d.root == "/" {
		return "/" + clockNode
	}
	return d.root + "/" + clockNode
}

// makeClock creates the clock node, a persistent node (a container with no
// children would do as well, but says less), and the root when missing.
func (d *Driver) makeClock(ctx context.Context) error {
	if err := d.makePath(ctx, d.root); err != nil {
		return err
	}
	err := d.call(ctx, func() error {
		_, err := d.conn.Create(d.clockPath(), nil, zk.FlagPersistent, d.acl)
		return err
	})
	if err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return mapErr(err)
	}
	return nil
}

// makePath creates p and its missing ancestors as container nodes.
func (d *Driver) makePath(ctx context.Context, p string) error {
	for i := 1; i <= len(p); i++ {
		if i < len(p) && p[i] != '/' {
			continue
		}
		err := d.call(ctx, func() error {
			_, err := d.conn.CreateContainer(p[:i], nil, zk.FlagContainer, d.acl)
			return err
		})
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return mapErr(err)
		}
	}
	return nil
}

// deleteNode deletes one node of owner's; a node that is gone already counts as
// deleted. When the outcome is unknown, the node is left to the sweeper.
func (d *Driver) deleteNode(ctx context.Context, lp, owner, name string) error {
	err := d.ownerCall(ctx, lp, owner, func() error { return d.conn.Delete(lp+"/"+name, -1) })
	if err == nil || errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	d.sweep.add(sweepEntry{lockPath: lp, owner: owner, name: name})
	return mapErr(err)
}

// grant is a successful acquisition.
type grant struct {
	token   uint64
	ttl     time.Duration
	node    string // the holder's node name
	meta    string
	session int64 // the session the node belongs to
	delayed bool  // the holding wrote a lock-delay marker

	// watch is the event channel of the child watch set by the last read of
	// the queue: fired before the holding is watched (see hold), it no longer
	// tells the holder of a deletion.
	watch <-chan zk.Event
}

// busy builds the error for a lock held by another owner with rem left (<0
// unknown); hd is the handle of owner's node when the attempt left one in the
// queue, nil otherwise. A queued waiter's watch is reliable (the client sets it
// again after a reconnect, and a session expiry ends it with an event), but the
// waiter comes back after retry without a wake: to rewrite its node within its
// TTL, and to remove a holder whose TTL has run out (which no event announces).
func (d *Driver) busy(rem time.Duration, hd *handle, retry time.Duration) error {
	if hd == nil {
		return &driver.Taken{Remaining: rem}
	}
	return &driver.Taken{Remaining: rem, RetryAfter: max(min(retry, d.SessionTimeout()), time.Millisecond), Queued: true,
		Handle: hd}
}

// handle is the Handle of a grant and of a queued waiter's BusyError: the name
// of the owner's node, and the metadata that Extend writes again; a waiter's
// handle also carries the Driver's record of its node, for the subscription.
type handle struct {
	node, metadata string
	w              *waiter
	token          uint64 // a holding's token
	delayed        bool   // a holding that wrote a lock-delay marker (see gate)
}

// nodeOf returns the node name in h's handle, if h has one of this driver's and
// it is h.Owner's.
func nodeOf(h driver.Holding) (*handle, bool) {
	hd, ok := h.Handle.(*handle)
	if !ok || hd == nil {
		return nil, false
	}
	c, ok := parseChild(hd.node)
	return hd, ok && c.owner == h.Owner
}

// acquire is one acquisition attempt; see Acquire.
func (d *Driver) acquire(ctx context.Context, key, owner string, ttl time.Duration, metadata string, waiting bool) (grant, error) {
	return d.acquireDelayed(ctx, key, owner, ttl, metadata, waiting, 0)
}

// acquireDelayed is acquire for a holding with a lock-delay (see gate).
func (d *Driver) acquireDelayed(ctx context.Context, key, owner string, ttl time.Duration, metadata string, waiting bool, delay time.Duration) (grant, error) {
	if err := d.checkArgs(key, owner); err != nil {
		return grant{}, err
	}
	if err := d.checkTTL(ttl); err != nil {
		return grant{}, err
	}
	start := time.Now()
	lp := d.lockPath(key)
	k := ownerKey{lp, owner}
	if err := d.awaitOwner(ctx, lp, owner); err != nil {
		return grant{}, err
	}
	// A retry with this owner takes over any clean-up still pending for it.
	// Such a clean-up means that an earlier call's outcome is unknown: the
	// queue must be read for a node that call made.
	unknown, err := d.sweep.forget(ctx, lp, owner)
	if err != nil {
		return grant{}, err
	}
	w := d.waiterOf(k)
	if w == nil {
		w = newWaiter("")
	} else if unknown {
		w.lost()
	}
	g, err := d.attempt(ctx, key, k, w, start, ttl, metadata, waiting, unknown, delay)
	var busy *driver.Taken
	switch {
	case errors.As(err, &busy) && busy.Queued:
		d.keepWaiter(k, w)
	case err != nil && w.node != "" && !errors.Is(err, driver.ErrNotObtained) && !errors.Is(err, driver.ErrInvalid) &&
		!errors.Is(err, driver.ErrConflict) && !errors.Is(err, driver.ErrRefused):
		// The next attempt, or the abandon, takes the node over.
		d.keepWaiter(k, w)
	default:
		d.dropWaiter(k)
	}
	return g, err
}

// attempt is acquire once its arguments are checked: w is what the earlier
// attempts of the owner left, start the start of this one.
//
// A waiting attempt's first call creates its node at once (one request, which
// also returns the token), then reads the queue; later attempts read the
// queue only. First in the queue, the node holds the lock, with no further
// request when its last write outlives the lease (it always does for a node
// made by this attempt). Behind another node, the attempt watches its
// predecessor (see watchPredecessor; a watch already set is kept) and rewrites
// its own node every waiterMargin/2. A TryLock reads the queue first and
// creates nothing when the lock is held.
func (d *Driver) attempt(ctx context.Context, key string, k ownerKey, w *waiter, start time.Time, ttl time.Duration, metadata string, waiting, unknown bool, delay time.Duration) (grant, error) {
	lp, owner := k.lockPath, k.owner
	wttl := ttl // the TTL in the node's data
	if waiting {
		wttl += waiterMargin(ttl)
	}
	for round := 0; round < maxRounds; round++ {
		var q []child
		var watch <-chan zk.Event // the child watch of the last read of q
		listed, marked := false, false
		if w.node == "" && (unknown || !waiting) {
			var err error
			if q, marked, watch, err = d.listWatched(ctx, lp); err != nil {
				return grant{}, err
			}
			listed = true
			if i := find(q, owner); i >= 0 {
				w.node = q[i].name // made by an earlier call whose reply was lost
			} else if len(q) > 0 && !waiting {
				// TryLock of a held lock: no node, no write.
				rem, gone, err := d.holderTTL(ctx, lp, q[0], true)
				if err != nil {
					return grant{}, err
				}
				if gone {
					continue
				}
				return grant{}, d.busy(rem, nil, 0)
			}
		}
		fresh := false
		if w.node == "" {
			wstart := time.Now()
			c, cq, cm, cw, err := d.createAndList(ctx, lp, owner, encodeData(wttl, metadata))
			marked, watch = cm, cw
			if c.name == "" {
				if !errors.Is(err, driver.ErrConflict) && !errors.Is(err, driver.ErrRefused) {
					// The create may have been applied with its reply lost.
					d.sweep.add(sweepEntry{lockPath: lp, owner: owner})
				}
				return grant{}, err
			}
			w.node, w.czxid, w.session = c.name, c.czxid, c.session
			w.written, w.writtenTTL = wstart, wttl
			fresh, q = true, cq
			if err != nil {
				if errors.Is(err, driver.ErrConflict) {
					// Not a lock node of dlock's: take the node back out.
					_ = d.deleteNode(ctx, lp, owner, w.node)
					w.lost()
				} else {
					d.sweep.add(sweepEntry{lockPath: lp, owner: owner})
				}
				return grant{}, err
			}
		} else if !listed {
			var err error
			if q, marked, watch, err = d.listWatched(ctx, lp); err != nil {
				return grant{}, err
			}
		}
		i := index(q, w.node)
		if i < 0 {
			// Gone: deleted as a dead waiter's, or with an expired session.
			w.lost()
			continue
		}
		// Other nodes of this owner are duplicates from creates whose replies
		// were lost: only the one found first counts.
		for _, c := range q {
			if c.owner == owner && c.name != w.node {
				_ = d.deleteNode(ctx, lp, owner, c.name)
			}
		}
		if i == 0 {
			g, err := d.take(ctx, lp, w, start, ttl, metadata, fresh)
			g.watch = watch
			if err != nil || !marked && delay == 0 {
				return g, err
			}
			return d.gated(ctx, lp, w, g, start, ttl, metadata, waiting, marked, delay)
		}
		if !waiting {
			// A TryLock that lost the race to another create.
			rem, gone, err := d.holderTTL(ctx, lp, q[0], true)
			if err != nil {
				cctx, cancel := driver.CleanupContext(ctx)
				_ = d.deleteNode(cctx, lp, owner, w.node)
				cancel()
				return grant{}, err
			}
			if err := d.deleteNode(ctx, lp, owner, w.node); err != nil {
				return grant{}, err
			}
			w.lost()
			if gone {
				continue
			}
			return grant{}, d.busy(rem, nil, 0)
		}
		if !fresh && (w.written.IsZero() || start.Sub(w.written) >= waiterMargin(ttl)/2) {
			// Rewrite the node: nobody takes it for a dead waiter's (see
			// holderTTL), and its data covers a take without a write.
			wstart := time.Now()
			var st *zk.Stat
			err := d.call(ctx, func() (err error) {
				st, err = d.conn.Set(lp+"/"+w.node, encodeData(wttl, metadata), -1)
				return err
			})
			if isNoNode(err) {
				w.lost()
				continue // removed as dead: queue again
			}
			if err != nil {
				return grant{}, mapErr(err)
			}
			w.wrote(wstart, wttl, st)
		}
		pred, head := q[i-1], i == 1
		pw := w.liveWatch(pred.name)
		if pw == nil || (head && !pw.data) {
			var err error
			if pw, err = d.watchPredecessor(ctx, lp, w, pred, head); err != nil {
				return grant{}, err
			}
			if pw == nil {
				continue // gone meanwhile: read the queue again
			}
		}
		rem, retry := time.Duration(-1), waiterMargin(ttl)/2
		if head {
			nd, st := w.predData(pw)
			rem = remaining(nd, st.Mtime)
			if rem < 0 && nd.TTL > 0 {
				left, gone, err := d.expired(ctx, lp, pred.name, nd, st)
				if err != nil {
					return grant{}, err
				}
				if gone {
					continue // we may be first now
				}
				rem = left
			}
			if rem >= 0 {
				retry = min(retry, rem+time.Millisecond) // the holder's TTL runs out
			}
		}
		return grant{}, d.busy(rem, &handle{node: w.node, metadata: metadata, w: w}, retry)
	}
	return grant{}, changing(key)
}

// index returns the position of the node named name in q, or -1.
func index(q []child, name string) int {
	for i, c := range q {
		if c.name == name {
			return i
		}
	}
	return -1
}

// take completes an acquisition by w's node, first in the queue. When the
// node's last write keeps it alive by its data past the lease (a node this
// attempt made, or a waiter's recent rewrite), the lock is held with no further
// request: the queue just read was a request in the session, which keeps the
// session alive at least the session timeout from then. Otherwise it writes the
// node's data again (ttl, from now), or only reads its token when this attempt
// made it.
func (d *Driver) take(ctx context.Context, lp string, w *waiter, start time.Time, ttl time.Duration, metadata string, fresh bool) (grant, error) {
	if w.covers(start, ttl) {
		return grant{token: uint64(w.czxid), ttl: ttl, node: w.node, meta: metadata, session: w.session}, nil
	}
	var st *zk.Stat
	err := d.call(ctx, func() (err error) {
		if fresh {
			_, st, err = d.conn.Get(lp + "/" + w.node)
		} else {
			st, err = d.conn.Set(lp+"/"+w.node, encodeData(ttl, metadata), -1)
		}
		return err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return grant{}, fmt.Errorf("%w: zklock: the node vanished as it was granted (session expired)", driver.ErrUnavailable)
	}
	if err != nil {
		return grant{}, mapErr(err)
	}
	if st.EphemeralOwner != d.conn.SessionID() {
		return grant{}, fmt.Errorf("%w: zklock: node %s/%s belongs to session %#x, not this one", driver.ErrConflict, lp, w.node, st.EphemeralOwner)
	}
	return grant{token: uint64(st.Czxid), ttl: ttl, node: w.node, meta: metadata, session: st.EphemeralOwner}, nil
}

// holderTTL reads the holder's node: the TTL it has left (-1 unknown), or gone
// when it was deleted in the meantime. With reap (another owner's attempt), a
// node whose TTL has run out by the server's clock is deleted, and reported
// gone: see expired.
func (d *Driver) holderTTL(ctx context.Context, lp string, holder child, reap bool) (time.Duration, bool, error) {
	var data []byte
	var st *zk.Stat
	err := d.call(ctx, func() (err error) {
		data, st, err = d.conn.Get(lp + "/" + holder.name)
		return err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return 0, true, nil
	}
	if err != nil {
		return 0, false, mapErr(err)
	}
	nd, _ := decodeData(data)
	rem := remaining(nd, st.Mtime)
	if !reap || rem >= 0 || nd.TTL <= 0 {
		return rem, false, nil
	}
	return d.expired(ctx, lp, holder.name, nd, st)
}

// expired settles a node whose TTL has run out by this host's clock: it asks the
// server for the time (the mtime of a write to the lock node: the same clock,
// the leader's, that stamped the node's last write), and deletes the node when
// its last write is more than its TTL ago by that clock, provided it has not
// been written since (its version). The node's owner stopped trusting it
// before: its local deadline counts from before that write, minus the drift
// margin. It returns the time left by the server's clock (-1 when this
// session may not write the lock node: the node then lives as long as its
// session), or gone.
func (d *Driver) expired(ctx context.Context, lp, name string, nd nodeData, st *zk.Stat) (time.Duration, bool, error) {
	var now *zk.Stat
	err := d.call(ctx, func() (err error) {
		now, err = d.conn.Set(lp, nil, -1)
		return err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return 0, true, nil // the lock node went with its last child
	}
	if errors.Is(err, zk.ErrNoAuth) {
		return -1, false, nil // no write access to the lock node: the session decides
	}
	if err != nil {
		return 0, false, mapErr(err)
	}
	if left := time.Duration(st.Mtime+nd.TTL-now.Mtime) * time.Millisecond; left > 0 {
		return min(left, time.Duration(nd.TTL)*time.Millisecond), false, nil
	}
	err = d.call(ctx, func() error { return d.conn.Delete(lp+"/"+name, st.Version) })
	switch {
	case err == nil, errors.Is(err, zk.ErrNoNode), errors.Is(err, zk.ErrBadVersion):
		// Deleted, gone, or renewed meanwhile: the caller reads the queue again.
		return 0, true, nil
	}
	return 0, false, mapErr(err)
}

// holderNode returns the lock node of h.Key and h.Owner's node in it, which
// holds the lock: from h's handle, or else found in the queue, where it must be
// first.
func (d *Driver) holderNode(ctx context.Context, h driver.Holding) (string, *handle, error) {
	if err := d.checkArgs(h.Key, h.Owner); err != nil {
		return "", nil, err
	}
	lp := d.lockPath(h.Key)
	if hd, ok := nodeOf(h); ok {
		return lp, hd, nil
	}
	q, err := d.list(ctx, lp)
	if err != nil {
		return "", nil, err
	}
	if len(q) == 0 || q[0].owner != h.Owner {
		return "", nil, notHeld(h.Key)
	}
	var data []byte
	err = d.call(ctx, func() (err error) {
		data, _, err = d.conn.Get(lp + "/" + q[0].name)
		return err
	})
	if isNoNode(err) {
		return "", nil, notHeld(h.Key)
	}
	if err != nil {
		return "", nil, mapErr(err)
	}
	nd, _ := decodeData(data)
	return lp, &handle{node: q[0].name, metadata: nd.Metadata}, nil
}

// extend rewrites the holder's node with ttl: it succeeds only while the node
// exists, in this (live) session.
func (d *Driver) extend(ctx context.Context, h driver.Holding, ttl time.Duration) (time.Duration, error) {
	if err := d.checkTTL(ttl); err != nil {
		return 0, err
	}
	lp, hd, err := d.holderNode(ctx, h)
	if err != nil {
		return 0, err
	}
	var st *zk.Stat
	err = d.call(ctx, func() (err error) {
		st, err = d.conn.Set(lp+"/"+hd.node, encodeData(ttl, hd.metadata), -1)
		return err
	})
	switch {
	case isNoNode(err):
		return 0, notHeld(h.Key)
	case err != nil:
		return 0, mapErr(err)
	case st.EphemeralOwner != d.conn.SessionID():
		return 0, fmt.Errorf("%w: %q: the node belongs to session %#x", driver.ErrNotHeld, h.Key, st.EphemeralOwner)
	}
	return ttl, nil
}

// ttlLeft returns the time the holder's node has left, from its last write.
func (d *Driver) ttlLeft(ctx context.Context, h driver.Holding) (time.Duration, error) {
	lp, hd, err := d.holderNode(ctx, h)
	if err != nil {
		return 0, err
	}
	rem, gone, err := d.holderTTL(ctx, lp, child{name: hd.node}, false)
	if err != nil {
		return 0, err
	}
	if gone {
		return 0, notHeld(h.Key)
	}
	if h.TTL > 0 {
		// A node that waited carries a margin beyond the lease's TTL (see
		// waiterMargin): the lease trusts the lock for its TTL at most.
		rem = min(rem, h.TTL)
	}
	return max(rem, 0), nil
}

// release deletes the holder's node named by h's handle, or else every node of
// h.Owner (see remove). It fails with dlock.ErrNotHeld when there is none.
func (d *Driver) release(ctx context.Context, h driver.Holding) error {
	hd, ok := nodeOf(h)
	if !ok {
		found, err := d.remove(ctx, h.Key, h.Owner)
		if err == nil && !found {
			return notHeld(h.Key)
		}
		return err
	}
	if err := d.checkArgs(h.Key, h.Owner); err != nil {
		return err
	}
	lp := d.lockPath(h.Key)
	if err := d.awaitOwner(ctx, lp, h.Owner); err != nil {
		d.sweep.add(sweepEntry{lockPath: lp, owner: h.Owner, name: hd.node})
		return err
	}
	var err error
	if hd.delayed {
		err = d.releaseDelayed(ctx, lp, h.Owner, hd)
	} else {
		err = d.ownerCall(ctx, lp, h.Owner, func() error { return d.conn.Delete(lp+"/"+hd.node, -1) })
	}
	switch {
	case isNoNode(err):
		return notHeld(h.Key)
	case err != nil:
		d.sweep.add(sweepEntry{lockPath: lp, owner: h.Owner, name: hd.node})
		return mapErr(err)
	}
	return nil
}

// remove deletes every node of owner under key's lock node (a holding, a
// waiter's place, duplicates), and reports whether there was one. When the
// outcome is unknown, owner's nodes are left to the sweeper.
func (d *Driver) remove(ctx context.Context, key, owner string) (bool, error) {
	if err := d.checkArgs(key, owner); err != nil {
		return false, err
	}
	lp := d.lockPath(key)
	d.dropWaiter(ownerKey{lp, owner}) // the acquisition has ended
	err := d.awaitOwner(ctx, lp, owner)
	var q []child
	if err == nil {
		q, err = d.list(ctx, lp)
	}
	if err != nil {
		if !errors.Is(err, driver.ErrConflict) {
			d.sweep.add(sweepEntry{lockPath: lp, owner: owner})
		}
		return false, err
	}
	found := false
	for _, c := range q {
		if c.owner == owner {
			found = true
			if err := d.deleteNode(ctx, lp, owner, c.name); err != nil {
				return found, err
			}
		}
	}
	return found, nil
}
