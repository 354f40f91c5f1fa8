package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Acquire implements dlock.Driver: one attempt to take r.Key for r.Owner. When
// another owner holds the lock it returns a *dlock.Busy; a waiting request
// (r.Waiting) then stays queued, and the error's Handle comes back in the next
// attempt. An attempt that finds an entry of r.Owner written by an earlier
// attempt (whose reply was lost) takes that entry over, with a lease of r.TTL.
func (d *Driver) Acquire(ctx context.Context, r dlock.AcquireRequest) (dlock.Grant, error) {
	ctx, done := d.request(ctx)
	g, err := d.acquire(ctx, r)
	return g, done(err)
}

func (d *Driver) acquire(ctx context.Context, r dlock.AcquireRequest) (dlock.Grant, error) {
	if err := checkOwner(r.Owner); err != nil {
		return dlock.Grant{}, err
	}
	h, err := handleOf(r.Handle)
	if err != nil {
		return dlock.Grant{}, err
	}
	secs := leaseSeconds(r.TTL)
	var (
		first   []*mvccpb.KeyValue
		granted int64
	)
	var prev *queueEntry // the waiter's handle, kept when its entry is written anew
	if r.Waiting && h != nil && h.entry == EntryKey(r.Key, r.Owner) {
		prev = h
		h, granted, first, err = d.recheck(ctx, r, h)
	} else {
		h = nil
	}
	if err == nil && h == nil {
		h, granted, first, err = d.write(ctx, r, secs)
		if err == nil && h != nil && prev != nil {
			// Same handle, new place: its subscription follows (moved).
			prev.replace(h)
			h = prev
		}
	}
	if err != nil {
		return dlock.Grant{}, err
	}
	if h != nil && len(first) == 1 && first[0].CreateRevision == h.revision() {
		return dlock.Grant{Token: uint64(h.revision()), TTL: seconds(granted), Handle: h}, nil
	}
	if len(first) == 1 && foreign(first[0]) {
		if h != nil {
			_ = d.removeDetached(ctx, h)
		}
		return dlock.Grant{}, conflict(r.Key, first[0])
	}
	busy := &dlock.Busy{Remaining: d.remaining(ctx, first)}
	if !r.Waiting {
		if h != nil { // TryLock leaves nothing behind
			_ = d.removeDetached(ctx, h)
		}
		return dlock.Grant{}, busy
	}
	busy.RetryAfter, busy.Handle, busy.Queued = seconds(granted)/3, h, true
	return dlock.Grant{}, busy
}

// recheck is a later attempt of a queued waiter: it renews the entry's lease and
// reads who is first. It returns a nil holding when the entry is gone (its lease
// ran out), to be written anew.
func (d *Driver) recheck(ctx context.Context, r dlock.AcquireRequest, h *queueEntry) (*queueEntry, int64, []*mvccpb.KeyValue, error) {
	// Renew first: a lease renewed before the read that finds the entry first
	// is good for its whole TTL from the start of this attempt.
	rev, lease, _ := h.state()
	start := time.Now()
	granted, err := d.keepAlive(ctx, lease)
	if errors.Is(err, dlock.ErrNotHeld) {
		return nil, 0, nil, nil
	}
	if err != nil {
		return nil, 0, nil, err
	}
	resp, err := d.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(h.entry), "=", rev),
			clientv3.Compare(clientv3.CreateRevision(AbandonKey(r.Key, r.Owner)), "=", 0)).
		Then(clientv3.OpGet(QueuePrefix(r.Key), clientv3.WithFirstCreate()...)).
		Commit()
	if err != nil {
		return nil, 0, nil, mapErr(err)
	}
	if !resp.Succeeded {
		d.revokeDetached(ctx, lease) // it carries nothing of ours now
		return nil, 0, nil, nil
	}
	h.renewal(start, granted)
	return h, granted, resp.Responses[0].GetResponseRange().Kvs, nil
}

// write puts owner's entry with a fresh lease of secs seconds: for a TryLock
// only if the queue is empty, for a waiter at the end of the queue. When an
// earlier attempt of the owner left an entry, write takes it over, moving it to
// the fresh lease (its place and token stay). It returns the entry (nil when a
// TryLock found the queue taken), the granted TTL and the first entry of the
// queue. Nothing is written for an abandoned acquisition.
func (d *Driver) write(ctx context.Context, r dlock.AcquireRequest, secs int64) (*queueEntry, int64, []*mvccpb.KeyValue, error) {
	entry, qp, gone := EntryKey(r.Key, r.Owner), QueuePrefix(r.Key), AbandonKey(r.Key, r.Owner)
	start := time.Now()
	lease, granted, err := d.grantLease(ctx, secs)
	if err != nil {
		return nil, 0, nil, err
	}
	conds := []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(entry), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(gone), "=", 0),
	}
	if !r.Waiting {
		conds = append(conds, clientv3.Compare(clientv3.CreateRevision(qp).WithPrefix(), "=", 0))
	}
	resp, err := d.cli.Txn(ctx).If(conds...).
		Then(clientv3.OpPut(entry, r.Metadata, clientv3.WithLease(lease)), clientv3.OpGet(qp, clientv3.WithFirstCreate()...)).
		Else(clientv3.OpGet(entry), clientv3.OpGet(gone, clientv3.WithCountOnly()), clientv3.OpGet(qp, clientv3.WithFirstCreate()...)).
		Commit()
	if err != nil {
		d.revokeDetached(ctx, lease) // whatever the transaction did goes with the lease
		return nil, 0, nil, mapErr(err)
	}
	if resp.Succeeded {
		h := newQueueEntry(entry, resp.Header.Revision, lease, secs)
		h.renewal(start, granted)
		return h, granted, resp.Responses[1].GetResponseRange().Kvs, nil
	}
	own := resp.Responses[0].GetResponseRange().Kvs
	first := resp.Responses[2].GetResponseRange().Kvs
	switch {
	case resp.Responses[1].GetResponseRange().Count > 0:
		d.revokeDetached(ctx, lease)
		return nil, 0, nil, fmt.Errorf("%w: the acquisition of %q was abandoned", dlock.ErrNotObtained, r.Key)
	case len(own) == 0: // a TryLock that found the queue taken
		d.revokeDetached(ctx, lease)
		return nil, 0, first, nil
	case foreign(own[0]):
		d.revokeDetached(ctx, lease)
		return nil, 0, nil, conflict(r.Key, own[0])
	}
	// An earlier attempt landed: move its entry to the fresh lease.
	old := own[0]
	resp, err = d.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(entry), "=", old.CreateRevision),
			clientv3.Compare(clientv3.CreateRevision(gone), "=", 0)).
		Then(clientv3.OpPut(entry, r.Metadata, clientv3.WithLease(lease)), clientv3.OpGet(qp, clientv3.WithFirstCreate()...)).
		Commit()
	if err != nil || !resp.Succeeded {
		d.revokeDetached(ctx, lease)
		if err != nil {
			return nil, 0, nil, mapErr(err)
		}
		return nil, 0, nil, fmt.Errorf("%w: etcd: entry %q changed while being taken over", dlock.ErrUnavailable, entry)
	}
	d.revokeDetached(ctx, clientv3.LeaseID(old.Lease))
	h := newQueueEntry(entry, old.CreateRevision, lease, secs)
	h.renewal(start, granted)
	return h, granted, resp.Responses[1].GetResponseRange().Kvs, nil
}

// remaining returns the lease time left of the entry in first (the holder),
// rounded up to whole seconds (a waiter needs to sleep no longer), or -1 when
// unknown.
func (d *Driver) remaining(ctx context.Context, first []*mvccpb.KeyValue) time.Duration {
	if len(first) != 1 {
		return -1
	}
	resp, err := d.cli.TimeToLive(ctx, clientv3.LeaseID(first[0].Lease))
	if err != nil {
		return -1
	}
	if resp.TTL < 0 {
		return 0
	}
	return seconds(min(resp.TTL+1, max(resp.GrantedTTL, resp.TTL)))
}
