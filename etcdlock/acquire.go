package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/driver"

	clientv3 "go.etcd.io/etcd/client/v3"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Acquire implements driver.Driver: one attempt to take r.Key for r.Owner. When
// another owner holds the lock it returns a *driver.Taken; a waiting request
// (r.Waiting) then stays queued, and the error's Handle comes back in the next
// attempt. An attempt that finds an entry of r.Owner written by an earlier
// attempt (whose reply was lost) takes that entry over. The entry is attached
// to the Driver's lease of r.TTL's class (see the package documentation); an
// attempt is one transaction, plus a renewal of that lease when it has less
// than r.TTL left.
func (d *Driver) Acquire(ctx context.Context, r driver.AcquireRequest) (driver.Grant, error) {
	ctx, done := d.request(ctx)
	g, err := d.acquire(ctx, r)
	return g, done(err)
}

// Info implements driver.Driver: etcd's locks are granted in the order their
// entries were created (driver.KindFair).
func (d *Driver) Info() driver.DriverInfo {
	return driver.DriverInfo{Backend: "etcdlock", Kind: driver.KindFair}
}

// attemptResult is what one attempt wrote and read: the entry (nil when a
// TryLock found the queue taken), the oldest entry of the queue, and the entry
// just older than the attempt's own (nil when unknown).
type attemptResult struct {
	h      *queueEntry
	first  *mvccpb.KeyValue
	ahead  *predecessor
	marker *mvccpb.KeyValue // the lock-delay marker read with the queue (see gate); nil when none
	rev    int64            // the revision of that read
}

// markerOf returns the lock-delay marker in the reply r of a read of DelayKey.
func markerOf(r *etcdserverpb.ResponseOp) *mvccpb.KeyValue {
	if kvs := r.GetResponseRange().GetKvs(); len(kvs) == 1 {
		return kvs[0]
	}
	return nil
}

func (d *Driver) acquire(ctx context.Context, r driver.AcquireRequest) (driver.Grant, error) {
	if err := checkOwner(r.Owner); err != nil {
		return driver.Grant{}, err
	}
	h, err := handleOf(r.Handle)
	if err != nil {
		return driver.Grant{}, err
	}
	secs := leaseSeconds(r.TTL)
	var res *attemptResult
	for i := 0; i < leaseAttempts; i++ {
		res, err = d.attempt(ctx, r, h, secs)
		if !errors.Is(err, errLeaseGone) {
			break
		}
	}
	if errors.Is(err, errLeaseGone) {
		err = fmt.Errorf("%w: etcd: the Driver's lease was gone %d times in a row", driver.ErrUnavailable, leaseAttempts)
	}
	if err != nil {
		if h != nil {
			h.markUncertain() // this attempt may still write
		}
		return driver.Grant{}, err
	}
	h = res.h
	if h != nil && res.first != nil && res.first.CreateRevision == h.revision() {
		if res.marker != nil || r.Delay > 0 {
			rem, err := d.gate(ctx, r, h, res)
			if err != nil || rem > 0 {
				if !r.Waiting {
					_ = d.removeDetached(ctx, h) // TryLock leaves nothing behind
					if err == nil {
						err = &driver.Taken{Remaining: rem}
					}
					return driver.Grant{}, err
				}
				if err != nil {
					h.markUncertain()
					return driver.Grant{}, err
				}
				// The subscription watches the marker, which goes when the
				// delay ends.
				h.setAhead(&predecessor{key: DelayKey(r.Key), rev: res.rev})
				return driver.Grant{}, &driver.Taken{Remaining: rem, RetryAfter: min(rem+time.Millisecond, seconds(secs)/3), Handle: h, Queued: true}
			}
		}
		d.hold(h)
		return driver.Grant{Token: uint64(h.revision()), TTL: seconds(secs), Handle: h, Lost: h.lost}, nil
	}
	if res.first != nil && foreign(res.first) {
		if h != nil {
			_ = d.removeDetached(ctx, h)
		}
		return driver.Grant{}, conflict(r.Key, res.first)
	}
	if !r.Waiting {
		if h != nil { // TryLock leaves nothing behind
			_ = d.removeDetached(ctx, h)
		}
		return driver.Grant{}, &driver.Taken{Remaining: d.remaining(ctx, res.first)}
	}
	// A waiter is woken by its subscription (see Subscribe), which watches the
	// predecessor this attempt read.
	h.setAhead(res.ahead)
	return driver.Grant{}, &driver.Taken{Remaining: -1, RetryAfter: seconds(secs) / 3, Handle: h, Queued: true}
}

// attempt makes one attempt on the Driver's lease of class secs, which it
// renews first when needed; errLeaseGone when the lease was found gone.
func (d *Driver) attempt(ctx context.Context, r driver.AcquireRequest, h *queueEntry, secs int64) (*attemptResult, error) {
	start := time.Now()
	sl, err := d.lease(ctx, secs, start)
	if err != nil {
		return nil, err
	}
	var (
		res  *attemptResult
		prev *queueEntry // the waiter's handle, kept when its entry is written anew
	)
	if r.Waiting && h != nil && h.entry == EntryKey(r.Key, r.Owner) {
		prev = h
		res, err = d.recheck(ctx, r, h, sl, start)
	}
	if err == nil && res == nil {
		res, err = d.write(ctx, r, sl, start)
		if err == nil && res.h != nil && prev != nil {
			// Same handle, new place: its subscription follows (moved).
			prev.takeOver(res.h)
			res.h = prev
		}
	}
	return res, err
}

// recheck is a later attempt of a queued waiter: one transaction that checks
// that its entry is still there, on the lease sl, and reads who is first and
// who is just ahead of it. It renews the entry's own deadline from start (sl
// has been renewed as needed). It returns a nil result when the entry is gone
// (its lease ran out) or elsewhere, to be written anew.
func (d *Driver) recheck(ctx context.Context, r driver.AcquireRequest, h *queueEntry, sl *sharedLease, start time.Time) (*attemptResult, error) {
	rev := h.revision()
	qp := QueuePrefix(r.Key)
	done := h.renewing()
	resp, err := d.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(h.entry), "=", rev),
			clientv3.Compare(clientv3.LeaseValue(h.entry), "=", sl.leaseID()),
			clientv3.Compare(clientv3.CreateRevision(AbandonKey(r.Key, r.Owner)), "=", 0)).
		Then(clientv3.OpGet(qp, clientv3.WithFirstCreate()...),
			clientv3.OpGet(qp, append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(rev-1), clientv3.WithKeysOnly())...),
			clientv3.OpGet(DelayKey(r.Key))).
		Commit()
	if err != nil {
		done(false, start)
		return nil, mapErr(err)
	}
	done(resp.Succeeded, start)
	if !resp.Succeeded {
		h.detachAll()
		return nil, nil
	}
	first := resp.Responses[0].GetResponseRange().Kvs
	res := &attemptResult{h: h, ahead: ahead(resp.Header.Revision, resp.Responses[1].GetResponseRange().Kvs),
		marker: markerOf(resp.Responses[2]), rev: resp.Header.Revision}
	if len(first) == 1 {
		res.first = first[0]
	}
	return res, nil
}

// write puts owner's entry on the lease sl in one transaction: for a TryLock
// only if the queue is empty, for a waiter at the end of the queue, reading who
// is first and who is just ahead in the same transaction. When an earlier
// attempt of the owner left an entry, write takes it over (moving it to sl when
// it is elsewhere; its place and token stay). Nothing is written for an
// abandoned acquisition.
func (d *Driver) write(ctx context.Context, r driver.AcquireRequest, sl *sharedLease, start time.Time) (*attemptResult, error) {
	entry, qp, gone, mark := EntryKey(r.Key, r.Owner), QueuePrefix(r.Key), AbandonKey(r.Key, r.Owner), DelayKey(r.Key)
	lease := sl.leaseID()
	conds := []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(entry), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(gone), "=", 0),
	}
	put := clientv3.OpPut(entry, r.Metadata, clientv3.WithLease(lease))
	// Every key of a request is written to etcd's log with it: the common
	// case carries as few as it can.
	var (
		resp *clientv3.TxnResponse
		err  error
	)
	if r.Waiting {
		// At the end of the queue, reading the newest two entries: this one
		// and the one just ahead of it, if any (the first then).
		resp, err = d.cli.Txn(ctx).If(conds...).Then(put,
			clientv3.OpGet(qp, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend),
				clientv3.WithLimit(2), clientv3.WithKeysOnly()),
			clientv3.OpGet(mark)).
			Commit()
	} else {
		// Only into an empty queue: the entry is then the first.
		resp, err = d.cli.Txn(ctx).
			If(append(conds, clientv3.Compare(clientv3.CreateRevision(qp).WithPrefix(), "=", 0))...).Then(put, clientv3.OpGet(mark)).
			Else(clientv3.OpGet(entry), clientv3.OpGet(gone, clientv3.WithCountOnly()), clientv3.OpGet(qp, clientv3.WithFirstCreate()...), clientv3.OpGet(mark)).
			Commit()
	}
	if err != nil {
		return nil, sl.failed(err)
	}
	if resp.Succeeded {
		rev := resp.Header.Revision
		h := newOwnEntry(entry, rev, sl)
		sl.attach(h, start.Add(seconds(sl.secs)))
		res := &attemptResult{h: h, rev: rev}
		var last []*mvccpb.KeyValue
		if r.Waiting {
			last = resp.Responses[1].GetResponseRange().Kvs
			res.marker = markerOf(resp.Responses[2])
		} else {
			res.marker = markerOf(resp.Responses[1])
		}
		if len(last) <= 1 { // nobody ahead
			res.first = &mvccpb.KeyValue{Key: []byte(entry), CreateRevision: rev, Lease: int64(lease)}
			return res, nil
		}
		res.ahead = ahead(rev, last[1:])
		if foreign(last[1]) {
			res.first = last[1] // foreign data in the queue: a conflict
		}
		return res, nil
	}
	if r.Waiting {
		// The entry or the abandonment's mark is there: read them.
		resp, err = d.cli.Txn(ctx).
			Then(clientv3.OpGet(entry), clientv3.OpGet(gone, clientv3.WithCountOnly()), clientv3.OpGet(qp, clientv3.WithFirstCreate()...), clientv3.OpGet(mark)).
			Commit()
		if err != nil {
			return nil, mapErr(err)
		}
	}
	own := resp.Responses[0].GetResponseRange().Kvs
	first := resp.Responses[2].GetResponseRange().Kvs
	marker, read := markerOf(resp.Responses[3]), resp.Header.Revision
	switch {
	case resp.Responses[1].GetResponseRange().Count > 0:
		return nil, fmt.Errorf("%w: the acquisition of %q was abandoned", driver.ErrNotObtained, r.Key)
	case len(own) == 0: // a TryLock that found the queue taken
		res := &attemptResult{}
		if len(first) == 1 {
			res.first = first[0]
		}
		return res, nil
	case foreign(own[0]):
		return nil, conflict(r.Key, own[0])
	}
	// An earlier attempt landed: take its entry over, on sl.
	old := own[0]
	if old.Lease != int64(lease) {
		resp, err = d.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(entry), "=", old.CreateRevision),
				clientv3.Compare(clientv3.CreateRevision(gone), "=", 0)).
			Then(clientv3.OpPut(entry, r.Metadata, clientv3.WithLease(lease)), clientv3.OpGet(qp, clientv3.WithFirstCreate()...), clientv3.OpGet(mark)).
			Commit()
		if err != nil {
			return nil, sl.failed(err)
		}
		if !resp.Succeeded {
			return nil, fmt.Errorf("%w: etcd: entry %q changed while being taken over", driver.ErrUnavailable, entry)
		}
		first = resp.Responses[1].GetResponseRange().Kvs
		marker, read = markerOf(resp.Responses[2]), resp.Header.Revision
	}
	h := newOwnEntry(entry, old.CreateRevision, sl)
	sl.attach(h, start.Add(seconds(sl.secs)))
	res := &attemptResult{h: h, marker: marker, rev: read}
	if len(first) == 1 {
		res.first = first[0]
	}
	return res, nil
}

// leaseID returns the lease's etcd ID.
func (sl *sharedLease) leaseID() clientv3.LeaseID {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	return sl.id
}

// failed maps the error of a write that attached an entry to sl: a lease that
// etcd does not know (any more) is errLeaseGone, and sl's entries are lost.
func (sl *sharedLease) failed(err error) error {
	if leaseGone(err) {
		sl.lost(leaseLost(sl.leaseID()))
		return errLeaseGone
	}
	return mapErr(err)
}

// remaining returns the lease time left of the entry in first (the holder),
// rounded up to whole seconds (a waiter needs to sleep no longer), or -1 when
// unknown. The lease is the one the holder's locks of its TTL share: the
// holding itself may end sooner.
func (d *Driver) remaining(ctx context.Context, first *mvccpb.KeyValue) time.Duration {
	if first == nil {
		return -1
	}
	resp, err := d.cli.TimeToLive(ctx, clientv3.LeaseID(first.Lease))
	if err != nil {
		return -1
	}
	if resp.TTL < 0 {
		return 0
	}
	return seconds(min(resp.TTL+1, max(resp.GrantedTTL, resp.TTL), class(resp.GrantedTTL)))
}

// class returns the TTL in seconds of the entries on a shared lease granted
// for granted seconds (see leaseTTL): an entry lives no longer than that after
// its holder's last renewal. A lease etcd granted longer than asked (its
// minimum TTL) gives the class it was asked for or a longer one.
func class(granted int64) int64 {
	s := max(granted*3/4, 1)
	for s > 1 && leaseTTL(s) > granted {
		s--
	}
	for leaseTTL(s+1) <= granted {
		s++
	}
	return s
}
