package zklock

import (
	"context"

	"github.com/dlock-go/dlock/driver"
)

// call runs f, a blocking ZooKeeper call, on a worker (see driver.Go),
// and returns its error, or ctx's error when ctx ends first (f then finishes on its own: the client answers every
// request, at the latest with an error when the connection drops or closes).
func (d *Driver) call(ctx context.Context, f func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	done := make(chan error, 1)
	driver.Go(func() { done <- f() })
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ownerKey names the nodes of one owner under one lock node.
type ownerKey struct{ lockPath, owner string }

// ownerCall is call for a request that changes owner's nodes under lp: the
// request is registered in d.inflight until it is answered, also when ctx ends
// first, so that awaitOwner can order later requests of the owner after it.
func (d *Driver) ownerCall(ctx context.Context, lp, owner string, f func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	k := ownerKey{lp, owner}
	d.inflightMu.Lock()
	ops := d.inflight[k]
	if ops == nil {
		ops = &opSet{done: make(chan struct{})}
		d.inflight[k] = ops
	}
	ops.n++
	d.inflightMu.Unlock()
	done := make(chan error, 1)
	driver.Go(func() {
		err := f()
		d.inflightMu.Lock()
		if ops.n--; ops.n == 0 {
			delete(d.inflight, k)
			close(ops.done)
		}
		d.inflightMu.Unlock()
		done <- err
	})
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// opSet counts the unanswered requests of one owner under one lock node; done
// is closed when the count is back to zero.
type opSet struct {
	n    int
	done chan struct{}
}

// awaitOwner waits until every request ownerCall sent for owner under lp has
// been answered, or ctx ends.
func (d *Driver) awaitOwner(ctx context.Context, lp, owner string) error {
	d.inflightMu.Lock()
	ops := d.inflight[ownerKey{lp, owner}]
	d.inflightMu.Unlock()
	if ops == nil {
		return nil
	}
	select {
	case <-ops.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
