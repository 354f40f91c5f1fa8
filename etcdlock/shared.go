package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/driver"
)

// leaseTTL is the TTL in seconds the shared lease of the class of secs-second
// entries is granted with: secs plus a margin of a third, so that the lease,
// renewed at most once per margin, always has secs left for an entry written
// or renewed without renewing it.
func leaseTTL(secs int64) int64 { return secs + (secs+2)/3 }

// sharedLease is one etcd lease of a Driver: every entry the Driver writes with
// a TTL of secs seconds is attached to it (etcd's form of renewing many locks at
// once). It is granted by the first entry of its class and renewed, one
// LeaseKeepAlive for all its entries, only when an entry is written or renewed
// and the lease has less than secs left. Entries keep their own deadlines (see
// queueEntry.until): the lease is never renewed past the deadline of an entry
// still on it.
type sharedLease struct {
	d    *Driver
	secs int64
	sem  chan struct{} // serialises grants, renewals and revocation

	mu      sync.Mutex
	id      clientv3.LeaseID // 0 until granted
	renewed time.Time        // the start of the last grant or renewal that succeeded
	granted int64            // the TTL it granted
	gone    bool             // expired, revoked or closed: the Driver grants another
	entries map[*queueEntry]struct{}
}

// errLeaseGone says that a shared lease was found gone; the caller takes the
// Driver's next one.
var errLeaseGone = errors.New("etcdlock: the shared lease is gone")

// leaseAttempts bounds how often an operation takes a new shared lease after
// finding the last one gone.
const leaseAttempts = 3

// class returns the Driver's lease of class secs, made (not yet granted) when
// there is none.
func (d *Driver) class(secs int64) *sharedLease {
	d.mu.Lock()
	defer d.mu.Unlock()
	sl := d.leases[secs]
	if sl == nil {
		sl = &sharedLease{d: d, secs: secs, sem: make(chan struct{}, 1), entries: map[*queueEntry]struct{}{}}
		if d.leases == nil {
			d.leases = map[int64]*sharedLease{}
		}
		d.leases[secs] = sl
	}
	return sl
}

// lease returns the Driver's lease of class secs, granted or renewed so that it
// lives at least secs from now.
func (d *Driver) lease(ctx context.Context, secs int64, now time.Time) (*sharedLease, error) {
	for i := 0; i < leaseAttempts; i++ {
		sl := d.class(secs)
		err := sl.fresh(ctx, now)
		if err == nil {
			return sl, nil
		}
		if !errors.Is(err, errLeaseGone) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("%w: etcd: the Driver's lease was gone %d times in a row", driver.ErrUnavailable, leaseAttempts)
}

// enter waits for the lease's turn to grant, renew or revoke.
func (sl *sharedLease) enter(ctx context.Context) error {
	select {
	case sl.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (sl *sharedLease) leave() { <-sl.sem }

// fresh grants the lease or renews it when it has less than secs left from
// now; errLeaseGone when it is gone.
func (sl *sharedLease) fresh(ctx context.Context, now time.Time) error {
	if ok, err := sl.lives(now); ok || err != nil {
		return err
	}
	if err := sl.enter(ctx); err != nil {
		return err
	}
	defer sl.leave()
	// Another call may have renewed it meanwhile.
	if ok, err := sl.lives(now); ok || err != nil {
		return err
	}
	sl.mu.Lock()
	id := sl.id
	sl.mu.Unlock()
	start := time.Now()
	if id == 0 {
		id, granted, err := sl.d.grantLease(ctx, leaseTTL(sl.secs))
		if err != nil {
			return err
		}
		sl.mu.Lock()
		sl.id, sl.renewed, sl.granted = id, start, granted
		sl.mu.Unlock()
		return nil
	}
	if err := sl.sweep(ctx, start); err != nil {
		return err
	}
	granted, err := sl.d.keepAlive(ctx, id)
	if errors.Is(err, driver.ErrNotHeld) {
		sl.lost(err)
		return errLeaseGone
	}
	if err != nil {
		return err
	}
	sl.mu.Lock()
	sl.renewed, sl.granted = start, granted
	sl.mu.Unlock()
	return nil
}

// lives reports whether the lease lives at least secs from now as far as its
// last grant or renewal tells; errLeaseGone when it is gone.
func (sl *sharedLease) lives(now time.Time) (bool, error) {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if sl.gone {
		return false, errLeaseGone
	}
	return sl.id != 0 && !sl.renewed.Add(seconds(sl.granted)).Before(now.Add(seconds(sl.secs))), nil
}

// sweep removes the entries past their own deadline (whose holders stopped
// renewing them and whose release failed) before the lease is renewed, so that
// no entry outlives its own TTL by more than the lease's margin. An error
// leaves the lease unrenewed.
func (sl *sharedLease) sweep(ctx context.Context, now time.Time) error {
	var stale []*queueEntry
	sl.mu.Lock()
	for h := range sl.entries {
		h.mu.Lock()
		if h.busy == 0 && !h.until.IsZero() && h.until.Before(now) {
			stale = append(stale, h)
		}
		h.mu.Unlock()
	}
	sl.mu.Unlock()
	for _, h := range stale {
		// Only while it is on this lease: a stale handle of an entry taken
		// over by another attempt of its owner must not remove it.
		_, err := sl.d.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(h.entry), "=", h.revision()),
				clientv3.Compare(clientv3.LeaseValue(h.entry), "=", sl.leaseID())).
			Then(clientv3.OpDelete(h.entry)).
			Commit()
		if err != nil {
			return mapErr(err)
		}
		sl.detach(h)
	}
	return nil
}

// lost marks the lease gone and ends the loss signal of every entry on it.
func (sl *sharedLease) lost(cause error) {
	sl.mu.Lock()
	if sl.gone {
		sl.mu.Unlock()
		return
	}
	sl.gone = true
	es := sl.entries
	sl.entries = nil
	sl.mu.Unlock()
	sl.d.mu.Lock()
	if sl.d.leases[sl.secs] == sl {
		delete(sl.d.leases, sl.secs)
	}
	sl.d.mu.Unlock()
	for h := range es {
		if h.lose != nil {
			h.lose(cause)
		}
	}
}

// attach records h as attached to the lease (written or moved there), with its
// own deadline until. When the lease is gone meanwhile, so is h.
func (sl *sharedLease) attach(h *queueEntry, until time.Time) {
	sl.mu.Lock()
	gone := sl.gone
	if !gone {
		sl.entries[h] = struct{}{}
	}
	id := sl.id
	sl.mu.Unlock()
	h.mu.Lock()
	h.sl, h.lease, h.secs, h.until = sl, id, sl.secs, until
	h.mu.Unlock()
	if gone && h.lose != nil {
		h.lose(leaseLost(id))
	}
}

// detach forgets h (released, abandoned, or moved to another lease).
func (sl *sharedLease) detach(h *queueEntry) {
	sl.mu.Lock()
	delete(sl.entries, h)
	sl.mu.Unlock()
}

// leaseLost is the loss of the entries on lease id.
func leaseLost(id clientv3.LeaseID) error {
	return fmt.Errorf("%w: etcd lease %x, shared by the Driver's locks of one TTL, expired or was revoked", driver.ErrNotHeld, int64(id))
}

// Close revokes the leases the Driver's locks share, and with them every lock
// and queue entry still on them (their Leases are lost at once). Call it after
// the last lock is released and before closing the etcd client; without it the
// leases expire on their own, a third more than their TTL after the last lock
// used them. The Driver stays usable: a later lock is granted a new lease.
func (d *Driver) Close() error {
	d.mu.Lock()
	ls := d.leases
	d.leases = nil
	d.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), d.timeout)
	defer cancel()
	var errs []error
	for _, sl := range ls {
		if err := sl.enter(ctx); err != nil {
			return mapErr(err)
		}
		sl.mu.Lock()
		id := sl.id
		sl.mu.Unlock()
		sl.lost(leaseLost(id))
		if id != 0 {
			if _, err := d.cli.Revoke(ctx, id); err != nil && !leaseGone(err) {
				errs = append(errs, mapErr(err))
			}
		}
		sl.leave()
	}
	return errors.Join(errs...)
}
