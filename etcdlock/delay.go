package etcdlock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// MaxLockDelay implements driver.LockDelayer. A holding with a lock-delay
// writes a marker, DelayKey (its token and delay, with no lease, so that it
// outlives the holding), when it is granted, and its release deletes it with
// its entry in one transaction. An entry gone without a release (its lease
// expired, the Driver removed it past its deadline, it was forced) leaves the
// marker: the next acquisition that comes first in the queue reads it with the
// queue, and starts the delay then, by attaching the marker to a lease of its
// own of the delay (whole seconds, rounded up; etcd may grant more); the lock
// stays in its delay until that lease expires and takes the marker with it,
// which wakes the first waiter (it watches the marker). etcd has no clock of
// its own to read, so the delay counts from that sight, which comes no earlier
// than the holding's end; a marker that nobody sees stays until an
// acquisition does.
func (d *Driver) MaxLockDelay() time.Duration { return driver.MaxLockDelay }

// delayMark is the value of a lock-delay marker: token and delay in ms.
func delayMark(token int64, delay time.Duration) string {
	return strconv.FormatInt(token, 10) + " " + strconv.FormatInt(delay.Milliseconds(), 10)
}

func parseMark(v []byte) (token, ms int64, ok bool) {
	t, m, found := strings.Cut(string(v), " ")
	if !found {
		return 0, 0, false
	}
	token, err1 := strconv.ParseInt(t, 10, 64)
	ms, err2 := strconv.ParseInt(m, 10, 64)
	return token, ms, err1 == nil && err2 == nil && ms >= 0
}

// gate is the lock-delay check of an acquisition r whose entry h is first in
// the queue, res being what its attempt read (see MaxLockDelay). It returns the
// time left of the lock's delay, or 0 when the acquisition may hold the lock,
// having written its own marker when r has a delay.
func (d *Driver) gate(ctx context.Context, r driver.AcquireRequest, h *queueEntry, res *attemptResult) (time.Duration, error) {
	mk, token := DelayKey(r.Key), h.revision()
	mine := false
	if m := res.marker; m != nil {
		tok, ms, ok := parseMark(m.Value)
		if !ok {
			return 0, fmt.Errorf("%w: etcd: %s holds %q, not a dlock lock-delay marker", driver.ErrConflict, mk, m.Value)
		}
		mine = tok == token
		switch {
		case mine:
		case m.Lease == 0:
			// The holding ended without a release: its delay starts now.
			id, granted, err := d.grantLease(ctx, leaseSeconds(time.Duration(ms)*time.Millisecond))
			if err != nil {
				return 0, err
			}
			resp, err := d.cli.Txn(ctx).
				If(clientv3.Compare(clientv3.ModRevision(mk), "=", m.ModRevision)).
				Then(clientv3.OpPut(mk, string(m.Value), clientv3.WithLease(id))).
				Commit()
			if err != nil || !resp.Succeeded {
				d.revokeDetached(ctx, id)
				if err != nil {
					return 0, mapErr(err)
				}
				return time.Millisecond, nil // seen by another meanwhile: look again
			}
			res.rev = resp.Header.Revision
			return seconds(granted), nil
		default:
			ttl, err := d.cli.TimeToLive(ctx, clientv3.LeaseID(m.Lease))
			if err != nil {
				return 0, mapErr(err)
			}
			// Whole seconds, rounded down: the watch of the marker wakes
			// the waiter at the end.
			return max(seconds(ttl.TTL), 100*time.Millisecond), nil
		}
	}
	if r.Delay <= 0 {
		return 0, nil
	}
	v := delayMark(token, r.Delay)
	resp, err := d.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(h.entry), "=", token)).
		Then(clientv3.OpPut(mk, v)).
		Commit()
	if err != nil {
		return 0, mapErr(err)
	}
	if !resp.Succeeded {
		return 0, fmt.Errorf("%w: etcd: the entry of %q vanished as it was granted", driver.ErrUnavailable, r.Key)
	}
	h.mu.Lock()
	h.delayMark = v
	h.mu.Unlock()
	return 0, nil
}

// releaseDelayed deletes h's entry with its lock-delay marker, in one
// transaction, and reports whether the entry was there; without the marker
// (not h's) it deletes the entry alone.
func (d *Driver) releaseDelayed(ctx context.Context, key string, h *queueEntry, mark string) (bool, error) {
	mk := DelayKey(key)
	resp, err := d.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(h.entry), "=", h.revision()),
			clientv3.Compare(clientv3.Value(mk), "=", mark)).
		Then(clientv3.OpDelete(h.entry), clientv3.OpDelete(mk)).
		Commit()
	if err != nil {
		return false, mapErr(err)
	}
	if resp.Succeeded {
		return true, nil
	}
	return d.remove(ctx, h)
}

// delayLeft returns the time left of the lock-delay that marker m keeps, the
// holder's token being holder (0: none): for a marker not yet seen, its whole
// delay (it starts at the next acquisition's sight); 0 for the holder's own.
func (d *Driver) delayLeft(ctx context.Context, m *mvccpb.KeyValue, holder int64) time.Duration {
	tok, ms, ok := parseMark(m.Value)
	if !ok || tok == holder {
		return 0
	}
	if m.Lease == 0 {
		return time.Duration(ms) * time.Millisecond
	}
	ttl, err := d.cli.TimeToLive(ctx, clientv3.LeaseID(m.Lease))
	if err != nil || ttl.TTL < 0 {
		return 0
	}
	return max(seconds(ttl.TTL), time.Millisecond)
}
