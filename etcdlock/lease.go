package etcdlock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/driver"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Extend keeps the holding for at least ttl (rounded up to whole seconds) from
// the start of the call, and returns that TTL. The holding's entry stays on
// the Driver's lease of its TTL, renewed first when it has less than ttl left
// (one renewal for every lock on it); Extend to another TTL moves the entry to
// the lease of that TTL, keeping its create revision (the fencing token).
// Either way it is one transaction, which checks that the entry is still the
// holding's (a read when the entry stays). It returns an error matching dlock.ErrNotHeld when the entry or
// its lease is gone.
func (d *Driver) Extend(ctx context.Context, hd driver.Holding, ttl time.Duration) (time.Duration, error) {
	granted, errs := d.extendMany(ctx, []driver.Holding{hd}, []time.Duration{ttl})
	return granted[0], errs[0]
}

func (d *Driver) extend(ctx context.Context, hd driver.Holding, ttl time.Duration) (time.Duration, error) {
	h, err := d.entryOf(ctx, hd)
	if err != nil {
		return 0, err
	}
	secs := leaseSeconds(ttl)
	for i := 0; i < leaseAttempts; i++ {
		start := time.Now()
		sl, err := d.lease(ctx, secs, start)
		if err != nil {
			return 0, err
		}
		ok, err := d.renew(ctx, h, sl, start)
		if err == errLeaseGone {
			continue
		}
		if err != nil {
			return 0, err
		}
		if !ok {
			return 0, notHeld(hd.Key)
		}
		return seconds(secs), nil
	}
	return 0, fmt.Errorf("%w: etcd: the Driver's lease was gone %d times in a row", driver.ErrUnavailable, leaseAttempts)
}

// renew checks, in one transaction, that h's entry is still the one written
// for it, and moves it to sl when it is elsewhere; on success h's own deadline
// counts from start.
func (d *Driver) renew(ctx context.Context, h *queueEntry, sl *sharedLease, start time.Time) (bool, error) {
	rev, lease, _ := h.state()
	next := sl.leaseID()
	done := h.renewing()
	var (
		resp *clientv3.TxnResponse
		err  error
	)
	if lease == next {
		resp, err = d.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(h.entry), "=", rev),
				clientv3.Compare(clientv3.LeaseValue(h.entry), "=", next)).
			Commit()
	} else {
		resp, err = d.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(h.entry), "=", rev)).
			Then(clientv3.OpPut(h.entry, "", clientv3.WithIgnoreValue(), clientv3.WithLease(next))).
			Commit()
	}
	if err != nil {
		done(false, start)
		return false, sl.failed(err)
	}
	if !resp.Succeeded {
		done(false, start)
		h.detachAll()
		return false, nil
	}
	if lease != next {
		h.detachAll()
		sl.attach(h, start.Add(seconds(sl.secs)))
	}
	done(true, start)
	return true, nil
}

// TTL implements driver.Driver: the time the holding has left. The store keeps
// the entry while its lease lives (whole seconds, rounded down); the Driver
// removes it at its own deadline (the start of its last acquire or extend plus
// its TTL) if its holder has not renewed it by then, so TTL returns the
// smaller of the two when the holding's handle knows its deadline. It returns
// an error matching dlock.ErrNotHeld when the entry or its lease is gone.
func (d *Driver) TTL(ctx context.Context, hd driver.Holding) (time.Duration, error) {
	ctx, done := d.request(ctx)
	ttl, err := d.ttl(ctx, hd)
	return ttl, done(err)
}

func (d *Driver) ttl(ctx context.Context, hd driver.Holding) (time.Duration, error) {
	h, err := d.entryOf(ctx, hd)
	if err != nil {
		return 0, err
	}
	resp, err := d.cli.Get(ctx, h.entry)
	if err != nil {
		return 0, mapErr(err)
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != h.revision() {
		return 0, notHeld(hd.Key)
	}
	lr, err := d.cli.TimeToLive(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
	if err != nil {
		return 0, mapErr(err)
	}
	if lr.TTL < 0 {
		return 0, notHeld(hd.Key)
	}
	if left := h.left(); left > 0 {
		return min(left, seconds(lr.TTL+1)), nil
	}
	return seconds(lr.TTL), nil
}

// grantLease grants a lease of secs seconds and returns it with the TTL the
// server granted (it may raise it to its minimum).
func (d *Driver) grantLease(ctx context.Context, secs int64) (clientv3.LeaseID, int64, error) {
	resp, err := d.cli.Grant(ctx, secs)
	if err != nil {
		return 0, 0, mapErr(err)
	}
	return resp.ID, resp.TTL, nil
}

// keepAlive renews lease once and returns its TTL; dlock.ErrNotHeld when it is gone.
func (d *Driver) keepAlive(ctx context.Context, lease clientv3.LeaseID) (int64, error) {
	resp, err := d.cli.KeepAliveOnce(ctx, lease)
	if leaseGone(err) {
		return 0, leaseLost(lease)
	}
	if err != nil {
		return 0, mapErr(err)
	}
	return resp.TTL, nil
}

// revokeDetached revokes lease on a context detached from ctx's cancellation:
// the clean-up of a call that failed or lost. A failure leaves the lease to
// expire on its own.
func (d *Driver) revokeDetached(ctx context.Context, lease clientv3.LeaseID) {
	cctx, cancel := driver.CleanupContext(ctx)
	defer cancel()
	_, _ = d.cli.Revoke(cctx, lease)
}

// leaseSeconds rounds ttl up to whole seconds, at least one.
func leaseSeconds(ttl time.Duration) int64 {
	s := int64((ttl + time.Second - 1) / time.Second)
	return max(s, 1)
}

func seconds(s int64) time.Duration { return time.Duration(s) * time.Second }
