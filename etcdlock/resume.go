package etcdlock

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/dlock-go/dlock/driver"

	clientv3 "go.etcd.io/etcd/client/v3"
)

var _ driver.Resumer = (*Driver)(nil)

// Resume implements driver.Resumer: one transaction takes up hd.Owner's entry
// of hd.Key if its create revision is token and no older entry is queued
// before it (it still holds the lock), and moves it to the Driver's shared
// lease of hd.TTL (whole seconds, rounded up), keeping its create revision,
// which is the fencing token. etcd's leases cannot change their TTL, and the
// detached holding's lease is its old Driver's, shared with that Driver's
// other locks, so the entry changes leases as an Extend to another TTL does;
// the lease it leaves goes on for the locks still on it. The same
// transaction reads the lock-delay marker, so that a holding taken with a
// lock-delay deletes its own marker when it is released. Like an
// acquisition, Resume grants or renews the shared lease first when it has
// less than hd.TTL left, and registers the holding with the Driver's loss
// watch. It returns an error matching dlock.ErrNotHeld, and writes nothing,
// when the entry is gone, is another owner's or token's, or is not first.
func (d *Driver) Resume(ctx context.Context, hd driver.Holding, token uint64) (driver.Grant, error) {
	ctx, done := d.request(ctx)
	g, err := d.resume(ctx, hd, token)
	return g, done(err)
}

func (d *Driver) resume(ctx context.Context, hd driver.Holding, token uint64) (driver.Grant, error) {
	if err := checkOwner(hd.Owner); err != nil {
		return driver.Grant{}, err
	}
	if token == 0 || token > math.MaxInt64 {
		return driver.Grant{}, notHeld(hd.Key)
	}
	rev, entry := int64(token), EntryKey(hd.Key, hd.Owner)
	tookUp, err := d.takeUp(ctx, entry)
	if err != nil {
		return driver.Grant{}, err
	}
	g, err := d.moveEntry(ctx, hd, rev, entry)
	tookUp(err == nil)
	return g, err
}

// moveEntry moves hd.Owner's entry, of create revision rev, to the Driver's
// shared lease of hd.TTL, if it still heads its queue (see Resume).
func (d *Driver) moveEntry(ctx context.Context, hd driver.Holding, rev int64, entry string) (driver.Grant, error) {
	mk := DelayKey(hd.Key)
	secs := leaseSeconds(hd.TTL)
	for i := 0; i < leaseAttempts; i++ {
		start := time.Now()
		sl, err := d.lease(ctx, secs, start)
		if err != nil {
			return driver.Grant{}, err
		}
		// Every entry of the queue compares: none is older than the
		// holding's own.
		resp, err := d.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(entry), "=", rev),
				clientv3.Compare(clientv3.CreateRevision(QueuePrefix(hd.Key)).WithPrefix(), ">", rev-1)).
			Then(clientv3.OpPut(entry, "", clientv3.WithIgnoreValue(), clientv3.WithLease(sl.leaseID())), clientv3.OpGet(mk)).
			Commit()
		if err != nil {
			if err = sl.failed(err); err == errLeaseGone {
				continue
			}
			// The transaction may have moved the entry to sl: a handle
			// of its own has it removed at the deadline this Resume
			// would have given it, unless a Resume takes it up again.
			ghost := newQueueEntry(entry, rev, sl.leaseID(), secs)
			sl.attach(ghost, start.Add(seconds(secs)))
			d.hold(ghost)
			return driver.Grant{}, err
		}
		if !resp.Succeeded {
			return driver.Grant{}, notHeld(hd.Key)
		}
		h := newOwnEntry(entry, rev, sl)
		if m := markerOf(resp.Responses[1]); m != nil {
			if tok, _, ok := parseMark(m.Value); ok && tok == rev {
				h.delayMark = string(m.Value)
			}
		}
		sl.attach(h, start.Add(seconds(secs)))
		d.hold(h)
		return driver.Grant{Token: uint64(rev), TTL: seconds(secs), Handle: h, Lost: h.lost}, nil
	}
	return driver.Grant{}, fmt.Errorf("%w: etcd: the Driver's lease was gone %d times in a row", driver.ErrUnavailable, leaseAttempts)
}

// takeUp holds off the sweep of the handle the Driver may still keep of
// entry (a holding of its own, detached, that it now resumes): its shared
// lease must not remove the entry at that handle's old deadline. It waits
// for a sweep under way, so that none sees the handle while the entry is
// being taken up. The returned function ends it: with true (the entry was
// taken up) the handle is retired; with false it is the sweep's again, so
// that the detached holding still ends at its deadline.
func (d *Driver) takeUp(ctx context.Context, entry string) (func(bool), error) {
	d.lw.mu.Lock()
	old := d.lw.holds[entry]
	d.lw.mu.Unlock()
	var sl *sharedLease
	if old != nil {
		sl = old.shared()
	}
	if sl == nil {
		return func(bool) {}, nil
	}
	if err := sl.enter(ctx); err != nil {
		return nil, mapErr(err)
	}
	old.mu.Lock()
	old.busy++
	old.mu.Unlock()
	sl.leave()
	return func(ok bool) {
		old.mu.Lock()
		old.busy--
		old.mu.Unlock()
		if ok {
			old.detachAll()
		}
	}, nil
}
