package zklock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/go-zookeeper/zk"
)

// maxRounds bounds the list/create rounds of one Acquire: a round is repeated
// only when a node it read went away in between.
const maxRounds = 5

// TTLLimits implements dlock.TTLLimiter: TTLs from dlock.MinTTL to the
// negotiated session timeout, in whole milliseconds (see the package
// documentation).
func (d *Driver) TTLLimits() dlock.TTLLimits {
	return dlock.TTLLimits{Min: dlock.MinTTL, Max: d.SessionTimeout(), Step: time.Millisecond}
}

// checkTTL checks ttl against the limits once more: the session timeout can
// change at a reconnect.
func (d *Driver) checkTTL(ttl time.Duration) error {
	if lim := d.TTLLimits(); ttl < lim.Min || ttl > lim.Max {
		return fmt.Errorf("%w: ttl %v outside [%v, %v] (the ZooKeeper session timeout bounds the TTL)", dlock.ErrInvalid, ttl, lim.Min, lim.Max)
	}
	return nil
}

func (d *Driver) checkArgs(key, owner string) error {
	if d == nil {
		return fmt.Errorf("%w: nil driver", dlock.ErrInvalid)
	}
	if err := dlock.ValidateKey(key); err != nil {
		return err
	}
	return checkOwner(owner)
}

// list returns the queue of the lock at lp (empty when the lock node is missing).
func (d *Driver) list(ctx context.Context, lp string) ([]child, error) {
	var names []string
	err := d.call(ctx, func() (err error) {
		names, _, err = d.conn.Children(lp)
		return err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, mapErr(err)
	}
	return queue(lp, names)
}

// create makes owner's ephemeral sequential node under lp, creating the lock
// node (and the root) as container nodes when missing, and returns its name.
func (d *Driver) create(ctx context.Context, lp, owner string, data []byte) (string, error) {
	for round := 0; ; round++ {
		if d.testHookCreate != nil {
			d.testHookCreate()
		}
		var path string
		err := d.ownerCall(ctx, lp, owner, func() (err error) {
			path, err = d.conn.Create(lp+"/"+childPrefix+owner+"-", data, zk.FlagEphemeralSequential, d.acl)
			return err
		})
		if err == nil {
			return path[len(lp)+1:], nil
		}
		if !errors.Is(err, zk.ErrNoNode) || round >= maxRounds {
			return "", mapErr(err)
		}
		// The lock node is missing (never made, or a container the server
		// removed): make it, and try again.
		if err := d.makePath(ctx, lp); err != nil {
			return "", err
		}
	}
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
}

// busy builds the error for a lock held by another owner with rem left; queued
// is owner's node when the attempt left one in the queue, "" otherwise. A queued
// waiter's watch is reliable (the client sets it again after a reconnect, and a
// session expiry ends it with an event), but the waiter comes back after retry
// without a wake: to rewrite its node within its TTL, and to remove a holder
// whose TTL has run out (which no event announces).
func (d *Driver) busy(rem time.Duration, queued, metadata string, retry time.Duration) error {
	if queued == "" {
		return &dlock.Busy{Remaining: rem}
	}
	return &dlock.Busy{Remaining: rem, RetryAfter: max(min(retry, d.SessionTimeout()), time.Millisecond), Queued: true,
		Handle: &handle{node: queued, metadata: metadata}}
}

// handle is the Handle of a grant and of a queued waiter's BusyError: the name
// of the owner's node, and the metadata that Extend writes again.
type handle struct {
	node, metadata string
}

// nodeOf returns the node name in h's handle, if h has one of this driver's and
// it is h.Owner's.
func nodeOf(h dlock.Holding) (*handle, bool) {
	hd, ok := h.Handle.(*handle)
	if !ok || hd == nil {
		return nil, false
	}
	c, ok := parseChild(hd.node)
	return hd, ok && c.owner == h.Owner
}

// acquire is one acquisition attempt; see Acquire.
func (d *Driver) acquire(ctx context.Context, key, owner string, ttl time.Duration, metadata string, waiting bool) (grant, error) {
	if err := d.checkArgs(key, owner); err != nil {
		return grant{}, err
	}
	if err := d.checkTTL(ttl); err != nil {
		return grant{}, err
	}
	lp := d.lockPath(key)
	if err := d.awaitOwner(ctx, lp, owner); err != nil {
		return grant{}, err
	}
	// A retry with this owner takes over any clean-up still pending for it.
	if err := d.sweep.forget(ctx, lp, owner); err != nil {
		return grant{}, err
	}
	for round := 0; round < maxRounds; round++ {
		q, err := d.list(ctx, lp)
		if err != nil {
			return grant{}, err
		}
		i := find(q, owner)
		fresh := i < 0
		if fresh {
			if len(q) > 0 && !waiting {
				// TryLock of a held lock: no node, no write.
				rem, gone, err := d.holderTTL(ctx, lp, q[0], true)
				if err != nil {
					return grant{}, err
				}
				if gone {
					continue
				}
				return grant{}, d.busy(rem, "", "", 0)
			}
			if _, err := d.create(ctx, lp, owner, encodeData(ttl, metadata)); err != nil {
				if !errors.Is(err, dlock.ErrConflict) && !errors.Is(err, dlock.ErrRefused) {
					// The create may have been applied with its reply lost.
					d.sweep.add(sweepEntry{lockPath: lp, owner: owner})
				}
				return grant{}, err
			}
			if q, err = d.list(ctx, lp); err != nil {
				d.sweep.add(sweepEntry{lockPath: lp, owner: owner})
				return grant{}, err
			}
			if i = find(q, owner); i < 0 {
				continue // gone already: the session expired in between
			}
		}
		// Nodes of this owner after the first are duplicates from creates
		// whose replies were lost: only the first counts.
		for _, c := range q[i+1:] {
			if c.owner == owner {
				_ = d.deleteNode(ctx, lp, owner, c.name)
			}
		}
		if i == 0 {
			return d.take(ctx, lp, q[0].name, ttl, metadata, fresh)
		}
		if !fresh && waiting {
			// A waiter's later attempt rewrites its node, so that nobody takes
			// it for the node of a dead waiter (see holderTTL).
			err := d.call(ctx, func() error {
				_, err := d.conn.Set(lp+"/"+q[i].name, encodeData(ttl, metadata), -1)
				return err
			})
			if isNoNode(err) {
				continue // removed as dead: queue again
			}
			if err != nil {
				return grant{}, mapErr(err)
			}
		}
		rem, gone, err := d.holderTTL(ctx, lp, q[0], true)
		if err != nil {
			if !waiting {
				cctx, cancel := dlock.CleanupContext(ctx)
				_ = d.deleteNode(cctx, lp, owner, q[i].name)
				cancel()
			}
			return grant{}, err
		}
		if gone && waiting && i == 1 {
			continue // we may be first now
		}
		if !waiting {
			if err := d.deleteNode(ctx, lp, owner, q[i].name); err != nil {
				return grant{}, err
			}
			if gone {
				continue
			}
		}
		if !waiting {
			return grant{}, d.busy(rem, "", "", 0)
		}
		retry := ttl / 3 // the node is rewritten well within its TTL
		if i == 1 && rem >= 0 {
			retry = min(retry, rem+time.Millisecond) // the holder's TTL runs out
		}
		return grant{}, d.busy(rem, q[i].name, metadata, retry)
	}
	return grant{}, changing(key)
}

// take completes an acquisition by the node name, first in the queue: it reads
// the node's czxid (the token) and, unless the node was made by this attempt
// (fresh), writes the node's data again so that other clients count its TTL from
// now.
func (d *Driver) take(ctx context.Context, lp, name string, ttl time.Duration, metadata string, fresh bool) (grant, error) {
	var data []byte
	var st *zk.Stat
	err := d.call(ctx, func() (err error) {
		data, st, err = d.conn.Get(lp + "/" + name)
		return err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return grant{}, fmt.Errorf("%w: zklock: the node vanished as it was granted (session expired)", dlock.ErrUnavailable)
	}
	if err != nil {
		return grant{}, mapErr(err)
	}
	if st.EphemeralOwner != d.conn.SessionID() {
		return grant{}, fmt.Errorf("%w: zklock: node %s/%s belongs to session %#x, not this one", dlock.ErrConflict, lp, name, st.EphemeralOwner)
	}
	if want := encodeData(ttl, metadata); !fresh || string(data) != string(want) {
		if err := d.call(ctx, func() (err error) {
			st, err = d.conn.Set(lp+"/"+name, encodeData(ttl, metadata), -1)
			return err
		}); err != nil {
			return grant{}, mapErr(err)
		}
	}
	return grant{token: uint64(st.Czxid), ttl: ttl, node: name, meta: metadata, session: st.EphemeralOwner}, nil
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
func (d *Driver) holderNode(ctx context.Context, h dlock.Holding) (string, *handle, error) {
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
func (d *Driver) extend(ctx context.Context, h dlock.Holding, ttl time.Duration) (time.Duration, error) {
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
		return 0, fmt.Errorf("%w: %q: the node belongs to session %#x", dlock.ErrNotHeld, h.Key, st.EphemeralOwner)
	}
	return ttl, nil
}

// ttlLeft returns the time the holder's node has left, from its last write.
func (d *Driver) ttlLeft(ctx context.Context, h dlock.Holding) (time.Duration, error) {
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
	return max(rem, 0), nil
}

// release deletes the holder's node named by h's handle, or else every node of
// h.Owner (see remove). It fails with dlock.ErrNotHeld when there is none.
func (d *Driver) release(ctx context.Context, h dlock.Holding) error {
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
	err := d.ownerCall(ctx, lp, h.Owner, func() error { return d.conn.Delete(lp+"/"+hd.node, -1) })
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
	err := d.awaitOwner(ctx, lp, owner)
	var q []child
	if err == nil {
		q, err = d.list(ctx, lp)
	}
	if err != nil {
		if !errors.Is(err, dlock.ErrConflict) {
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
