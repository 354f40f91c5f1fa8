package zklock

import (
	"context"
	"time"

	"github.com/dlock-go/dlock"
)

var (
	_ dlock.Driver     = (*Driver)(nil)
	_ dlock.Notifier   = (*Driver)(nil)
	_ dlock.Abandoner  = (*Driver)(nil)
	_ dlock.TTLLimiter = (*Driver)(nil)
	_ dlock.Inspector  = (*Driver)(nil)
)

// Acquire implements dlock.Driver: one attempt to take r.Key for r.Owner. A
// TryLock attempt (r.Waiting false) never queues: on a held lock it creates
// nothing, and a node it made that turns out not to be first is deleted again.
// A waiting attempt queues a node, or finds the one an earlier attempt of the
// same owner made (also one whose create reply was lost), and returns a
// *dlock.BusyError (Queued, with the node as its Handle) while it is not first.
// The token is the node's czxid.
//
// The grant's Lost ends when the session expires (its nodes are gone then): the
// Lease is lost at once, not at its next renewal or its deadline.
func (d *Driver) Acquire(ctx context.Context, r dlock.AcquireRequest) (dlock.Grant, error) {
	ctx, done := d.request(ctx)
	g, err := d.acquire(ctx, r.Key, r.Owner, r.TTL, r.Metadata, r.Waiting)
	if err = done(err); err != nil {
		return dlock.Grant{}, err
	}
	return dlock.Grant{Token: g.token, TTL: g.ttl, Handle: &handle{node: g.node, metadata: g.meta},
		Lost: d.sess.lost(g.session, d.conn.SessionID())}, nil
}

// Extend implements dlock.Driver: it rewrites the holder's node with ttl, which
// must not exceed the session timeout. It fails with dlock.ErrNotHeld when the
// node is gone (released, forced, or deleted with its expired session).
func (d *Driver) Extend(ctx context.Context, h dlock.Holding, ttl time.Duration) (time.Duration, error) {
	ctx, done := d.request(ctx)
	granted, err := d.extend(ctx, h, ttl)
	return granted, done(err)
}

// Release implements dlock.Driver: it deletes the holder's node, and touches no
// other owner's. It returns dlock.ErrNotHeld when the node is gone.
func (d *Driver) Release(ctx context.Context, h dlock.Holding) error {
	ctx, done := d.request(ctx)
	return done(d.release(ctx, h))
}

// TTL implements dlock.Driver: the time left of the holder's TTL, counted from
// the last write of its node.
func (d *Driver) TTL(ctx context.Context, h dlock.Holding) (time.Duration, error) {
	ctx, done := d.request(ctx)
	left, err := d.ttlLeft(ctx, h)
	return left, done(err)
}

// Abandon implements dlock.Abandoner: it deletes every node of h.Owner under
// the lock, held or queued, after the owner's requests still in flight have
// been answered (so that a create answered late is deleted too); when the
// server cannot be reached in time, the Driver deletes them once it can. It is
// not an error when there is none.
func (d *Driver) Abandon(ctx context.Context, h dlock.Holding) error {
	ctx, done := d.request(ctx)
	_, err := d.remove(ctx, h.Key, h.Owner)
	return done(err)
}

// Subscribe implements dlock.Notifier. It watches the node just before the
// waiter's in the queue (not the whole queue), and sends on the returned
// channel when the waiter's node becomes first, or when the waiter should try
// again because its node or the session is gone.
func (d *Driver) Subscribe(ctx context.Context, h dlock.Holding) (<-chan struct{}, func(), error) {
	return d.subscribe(ctx, h.Key, h.Owner)
}
