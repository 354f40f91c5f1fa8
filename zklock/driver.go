package zklock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
)

var (
	_ dlock.Driver    = (*Driver)(nil)
	_ dlock.Notifier  = (*Driver)(nil)
	_ dlock.Abandoner = (*Driver)(nil)
)

// Acquire makes one attempt to take r.Key for r.Owner. A TryLock attempt
// (r.Waiting false) never queues: on a held lock it creates nothing, and a node
// it made that turns out not to be first is deleted again. A waiting attempt
// queues a node (or finds the one an earlier attempt of the same owner made) and
// returns a *dlock.BusyError while it is not first. The token is the node's
// czxid.
func (d *Driver) Acquire(ctx context.Context, r dlock.AcquireRequest) (uint64, error) {
	g, err := d.acquire(ctx, r.Key, r.Owner, r.TTL, r.Metadata, r.Waiting)
	return g.token, err
}

// Extend rewrites the holder's node with ttl, which must not exceed the session
// timeout. It fails with dlock.ErrNotHeld when the node is gone (released,
// forced, or deleted with its expired session).
func (d *Driver) Extend(ctx context.Context, key, owner string, ttl time.Duration) error {
	return d.extend(ctx, key, owner, ttl)
}

// Release deletes owner's nodes under key. It returns dlock.ErrNotHeld when owner
// has none, and touches no other owner's node.
func (d *Driver) Release(ctx context.Context, key, owner string) error {
	found, err := d.remove(ctx, key, owner)
	if err == nil && !found {
		return fmt.Errorf("%w: %q has no node of this owner", dlock.ErrNotHeld, key)
	}
	return err
}

// TTL returns the time left of the holder's TTL, counted from the last write of
// its node.
func (d *Driver) TTL(ctx context.Context, key, owner string) (time.Duration, error) {
	return d.ttlLeft(ctx, key, owner)
}

// Abandon deletes a waiter's queued node at once, so that its successor watches
// the right node; it is not an error when there is none.
func (d *Driver) Abandon(ctx context.Context, key, owner string) error {
	_, err := d.remove(ctx, key, owner)
	return err
}

// Subscribe watches the node just before owner's queued node (not the whole
// queue), and sends on the returned channel when owner's node becomes first, or
// when the waiter should try again because its node or the session is gone.
func (d *Driver) Subscribe(ctx context.Context, key, owner string) (<-chan struct{}, func(), error) {
	return d.subscribe(ctx, key, owner)
}
