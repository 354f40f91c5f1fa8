package etcdlock

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock"
)

// Extend keeps the holding for at least ttl (rounded up to whole seconds) from
// the start of the call, and returns the TTL granted. With the TTL already
// granted it renews the lease; with another it moves the entry to a new lease,
// keeping its create revision (the fencing token). It returns an error matching
// dlock.ErrNotHeld when the lease or the entry is gone.
func (d *Driver) Extend(ctx context.Context, hd dlock.Holding, ttl time.Duration) (time.Duration, error) {
	ctx, done := d.request(ctx)
	granted, err := d.extend(ctx, hd, ttl)
	return granted, done(err)
}

func (d *Driver) extend(ctx context.Context, hd dlock.Holding, ttl time.Duration) (time.Duration, error) {
	h, err := d.entryOf(ctx, hd)
	if err != nil {
		return 0, err
	}
	secs := leaseSeconds(ttl)
	rev, lease, asked := h.state()
	start := time.Now()
	if secs == asked {
		granted, err := d.keepAlive(ctx, lease)
		if err != nil {
			return 0, err
		}
		resp, err := d.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(h.entry), "=", rev)).Commit()
		if err != nil {
			return 0, mapErr(err)
		}
		if !resp.Succeeded {
			d.revokeDetached(ctx, lease)
			return 0, notHeld(hd.Key)
		}
		h.renewal(start, granted)
		return seconds(granted), nil
	}
	next, granted, err := d.grantLease(ctx, secs)
	if err != nil {
		return 0, err
	}
	resp, err := d.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(h.entry), "=", rev)).
		Then(clientv3.OpPut(h.entry, "", clientv3.WithIgnoreValue(), clientv3.WithLease(next))).
		Commit()
	if err != nil {
		// If the move was applied, revoking the new lease deletes the entry: the
		// lock is lost, which the next Extend reports. Never two holders.
		d.revokeDetached(ctx, next)
		return 0, mapErr(err)
	}
	if !resp.Succeeded {
		d.revokeDetached(ctx, next)
		d.revokeDetached(ctx, lease)
		return 0, notHeld(hd.Key)
	}
	h.set(rev, next, secs)
	h.renewal(start, granted)
	d.revokeDetached(ctx, lease) // holds nothing now; it would expire anyway
	return seconds(granted), nil
}

// TTL implements dlock.Driver: the lease time left on the holding. etcd reports
// it in whole seconds rounded down; when this driver granted or renewed the
// lease, the TTL granted then less the time since the request was sent is a
// closer lower bound, and TTL returns the larger of the two. It returns an error matching dlock.ErrNotHeld when
// the lease is gone or no longer carries the holding's entry.
func (d *Driver) TTL(ctx context.Context, hd dlock.Holding) (time.Duration, error) {
	ctx, done := d.request(ctx)
	ttl, err := d.ttl(ctx, hd)
	return ttl, done(err)
}

func (d *Driver) ttl(ctx context.Context, hd dlock.Holding) (time.Duration, error) {
	h, err := d.entryOf(ctx, hd)
	if err != nil {
		return 0, err
	}
	_, lease, _ := h.state()
	resp, err := d.cli.TimeToLive(ctx, lease, clientv3.WithAttachedKeys())
	if err != nil {
		return 0, mapErr(err)
	}
	if resp.TTL < 0 {
		return 0, notHeld(hd.Key)
	}
	for _, k := range resp.Keys {
		if string(k) == h.entry {
			return max(seconds(resp.TTL), min(h.left(), seconds(resp.TTL+1))), nil
		}
	}
	return 0, notHeld(hd.Key)
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
		return 0, fmt.Errorf("%w: etcd lease %x expired or revoked", dlock.ErrNotHeld, int64(lease))
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
	cctx, cancel := dlock.CleanupContext(ctx)
	defer cancel()
	_, _ = d.cli.Revoke(cctx, lease)
}

// leaseSeconds rounds ttl up to whole seconds, at least one.
func leaseSeconds(ttl time.Duration) int64 {
	s := int64((ttl + time.Second - 1) / time.Second)
	return max(s, 1)
}

func seconds(s int64) time.Duration { return time.Duration(s) * time.Second }
