package etcdlock

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/driver"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Release deletes the holding's entry if it is still the one written for it
// (same create revision): one transaction. The lease stays, shared with the
// Driver's other locks of the same TTL (see Close). It returns an error matching
// dlock.ErrNotHeld, and touches no other entry, when the entry is gone.
func (d *Driver) Release(ctx context.Context, hd driver.Holding) error {
	ctx, done := d.request(ctx)
	return done(d.release(ctx, hd))
}

func (d *Driver) release(ctx context.Context, hd driver.Holding) error {
	h, err := d.entryOf(ctx, hd)
	if err != nil {
		return err
	}
	d.forget(h)
	h.mu.Lock()
	mark := h.delayMark
	h.mu.Unlock()
	var deleted bool
	if mark != "" {
		deleted, err = d.releaseDelayed(ctx, hd.Key, h, mark)
	} else {
		deleted, err = d.remove(ctx, h)
	}
	if err != nil {
		return err
	}
	h.detachAll()
	if !deleted {
		return notHeld(hd.Key)
	}
	return nil
}

// The mark of an abandoned acquisition (see Driver.Abandon) lives the
// acquisition's TTL plus the request timeout, in whole seconds: an attempt of the
// acquisition still in flight when it was abandoned cannot write its entry while
// the mark lives, and an entry it wrote before is deleted with the marking. An
// attempt's transaction attaches the entry to the Driver's shared lease, which
// lives as long as the Driver renews it; so the bound is etcd's: a transaction
// that etcd applies more than the mark's life after the attempt gave up on it
// (the attempt gives up within a request timeout) would write an entry that
// only the lease's end removes.

// Abandon implements driver.Abandoner: it removes owner's entry, whether it holds
// the lock or waits (so the waiters behind it move up at once). When an attempt
// of the acquisition may still be in flight (its reply was lost or cut short,
// or the holding names no handle), it also marks the acquisition abandoned, in
// the same transaction, for its TTL plus the request timeout, so that such an
// attempt cannot write the entry again; when every attempt was answered (a
// waiter that gives up), the removal is all. An entry already gone is not an
// error.
func (d *Driver) Abandon(ctx context.Context, hd driver.Holding) error {
	ctx, done := d.request(ctx)
	return done(d.abandon(ctx, hd))
}

func (d *Driver) abandon(ctx context.Context, hd driver.Holding) error {
	if err := checkOwner(hd.Owner); err != nil {
		return err
	}
	h, err := handleOf(hd.Handle)
	if err != nil {
		return err
	}
	entry, gone := EntryKey(hd.Key, hd.Owner), AbandonKey(hd.Key, hd.Owner)
	if h != nil {
		d.forget(h)
	}
	if h != nil && h.entry == entry && !h.isUncertain() {
		// Every attempt of the acquisition was answered: none is in flight,
		// and the entry they wrote is h's. Removing it is enough.
		if _, err := d.remove(ctx, h); err != nil {
			return err
		}
		h.detachAll()
		return nil
	}
	mark, _, err := d.grantLease(ctx, leaseSeconds(max(hd.TTL, time.Second)+d.timeout))
	if err != nil {
		return err
	}
	_, err = d.cli.Txn(ctx).
		Then(clientv3.OpPut(gone, "", clientv3.WithLease(mark)), clientv3.OpDelete(entry)).
		Commit()
	if err != nil {
		d.revokeDetached(ctx, mark)
		return mapErr(err)
	}
	// The entry's lease is shared with the Driver's other entries: it stays.
	if h != nil {
		h.detachAll()
	}
	return nil
}

// remove deletes h's entry if its create revision is unchanged, and reports
// whether it was deleted. The entry's lease stays: it may carry others.
func (d *Driver) remove(ctx context.Context, h *queueEntry) (bool, error) {
	resp, err := d.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(h.entry), "=", h.revision())).
		Then(clientv3.OpDelete(h.entry)).
		Commit()
	if err != nil {
		return false, mapErr(err)
	}
	return resp.Succeeded, nil
}

// removeDetached is remove on a context detached from ctx's cancellation: the
// clean-up of an attempt that wrote an entry it must not keep.
func (d *Driver) removeDetached(ctx context.Context, h *queueEntry) error {
	cctx, cancel := driver.CleanupContext(ctx)
	defer cancel()
	_, err := d.remove(cctx, h)
	if err == nil {
		h.detachAll()
	}
	return err
}
