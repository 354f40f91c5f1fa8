// Package etcdlock is dlock's etcd backend: exclusive leases with fencing tokens
// on an etcd cluster, through the caller's go.etcd.io/etcd/client/v3 client. It
// is a module of its own, so that programs using only the Redis backend do not
// build etcd's client.
//
// # Layout
//
// Every contender for the lock named KEY writes one entry, "dlock/{KEY}/OWNER",
// whose value is its metadata and whose create revision is its place in the
// queue and, once it holds the lock, its fencing token: the entry with the
// lowest create revision holds the lock. Lock names cannot contain '{' or '}',
// so the queue of "a" never contains entries of "a/x". Every entry is attached
// to a lease; no entry exists without one.
//
// # Leases
//
// Each holding (and each waiter's entry) has a lease of its own, granted with
// the holding's TTL in whole seconds; etcd raises a shorter TTL to its minimum
// (1.5 election timeouts: 2s with default settings), and the TTL the server
// granted is the one reported. A lease per holding rather than one per
// process (etcd's concurrency.Session) because dlock negotiates the TTL per lock
// and renews, caps (WithMaxHold) and re-times (Extend) each lock on its own: with
// its own lease the server forgets exactly that lock when its renewals stop, a
// lost lease loses one lock and not all of a process's locks, Extend to a new
// TTL moves the entry to a fresh lease without changing its create revision, and
// Release revokes the lease, so no lease outlives its lock. The price is one
// LeaseGrant per acquisition and one LeaseRevoke per release. Extend with the
// granted TTL is one KeepAliveOnce; a lease that is gone means the lock is lost
// (dlock.ErrNotHeld).
//
// # Waiting
//
// A waiter (Lock) writes its entry on its first attempt and keeps it across
// attempts: the entry is its handle. It waits watching only its predecessor,
// the entry created just before its own, so a release wakes one waiter and
// never a herd; when the predecessor goes, the waiter holds the lock if no older
// entry is left, and otherwise watches the next older one. Each attempt renews
// the waiter's lease, and a busy attempt asks to be retried after a third of the
// lease TTL without a wake, so the entry of a waiter that died or gave up
// silently disappears within one TTL. A waiter that gives up removes its entry
// at once (Abandon). TryLock does not queue: it writes its entry only if the
// queue is empty, in one transaction, and leaves nothing behind otherwise.
//
// A Driver holds no connection of its own: the caller creates the etcd client,
// shares it, and closes it after the last lock is released.
package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Prefix starts every key dlock writes to etcd.
const Prefix = "dlock/"

// cleanupTimeout bounds the detached lease revocations made after a failed call.
const cleanupTimeout = 2 * time.Second

// QueuePrefix returns the etcd key prefix of the entries of the lock named key.
func QueuePrefix(key string) string { return Prefix + "{" + key + "}/" }

// EntryKey returns the etcd key of owner's entry for the lock named key.
func EntryKey(key, owner string) string { return QueuePrefix(key) + owner }

// Driver is the etcd implementation of dlock's backend contract: single attempts
// of acquire, extend, release and TTL, plus wake-ups for waiters, abandonment of
// a waiter's entry, and inspection. Most users want New instead.
type Driver struct {
	cli   *clientv3.Client
	wakes atomic.Int64 // wake-ups sent to waiters, for tests
}

// NewDriver returns the etcd driver over cli. It returns an error matching
// dlock.ErrInvalid for a nil client; it does no I/O.
func NewDriver(cli *clientv3.Client) (*Driver, error) {
	if cli == nil {
		return nil, fmt.Errorf("%w: nil etcd client", dlock.ErrInvalid)
	}
	return &Driver{cli: cli}, nil
}

// TTLLimits returns the lease times etcd can grant: whole seconds, at least one.
// The server may grant more than asked (its minimum TTL); the granted TTL is
// reported in every Grant and Extend.
func (d *Driver) TTLLimits() TTLLimits {
	return TTLLimits{Min: time.Second, Max: dlock.MaxTTL, Step: time.Second}
}

// holding is the Handle of an entry: a holding or a waiter's queue position.
type holding struct {
	entry string

	mu    sync.Mutex
	rev   int64            // create revision: the place in the queue and the fencing token
	lease clientv3.LeaseID // the entry's lease
	ttl   int64            // the lease's granted TTL in seconds; 0 when unknown
	moved chan struct{}    // closed when rev changes (the entry was written anew)
}

func newHolding(entry string, rev int64, lease clientv3.LeaseID, ttl int64) *holding {
	return &holding{entry: entry, rev: rev, lease: lease, ttl: ttl, moved: make(chan struct{})}
}

func (h *holding) state() (rev int64, lease clientv3.LeaseID, ttl int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rev, h.lease, h.ttl
}

// watchState returns the revision and a channel closed when it changes.
func (h *holding) watchState() (int64, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rev, h.moved
}

func (h *holding) set(rev int64, lease clientv3.LeaseID, ttl int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if rev != h.rev {
		close(h.moved)
		h.moved = make(chan struct{})
	}
	h.rev, h.lease, h.ttl = rev, lease, ttl
}

// Acquire makes one attempt to take r.Key for r.Owner. When another owner holds
// the lock it returns a *BusyError; a waiting request (r.Waiting) then stays
// queued, and the error's Handle must be passed back in the next attempt.
func (d *Driver) Acquire(ctx context.Context, r AcquireRequest) (Grant, error) {
	if err := checkOwner(r.Owner); err != nil {
		return Grant{}, err
	}
	h, err := handleOf(r.Handle)
	if err != nil {
		return Grant{}, err
	}
	secs := leaseSeconds(r.TTL)
	if !r.Waiting {
		return d.tryAcquire(ctx, r, secs)
	}
	return d.enqueue(ctx, r, secs, h)
}

// tryAcquire writes the entry only if the queue is empty: TryLock never queues.
func (d *Driver) tryAcquire(ctx context.Context, r AcquireRequest, secs int64) (Grant, error) {
	lease, granted, err := d.grantLease(ctx, secs)
	if err != nil {
		return Grant{}, err
	}
	entry, qp := EntryKey(r.Key, r.Owner), QueuePrefix(r.Key)
	resp, err := d.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(qp).WithPrefix(), "=", 0)).
		Then(clientv3.OpPut(entry, r.Metadata, clientv3.WithLease(lease))).
		Else(clientv3.OpGet(qp, clientv3.WithFirstCreate()...)).
		Commit()
	if err != nil {
		d.revokeDetached(ctx, lease) // whatever the transaction did goes with the lease
		return Grant{}, mapErr(err)
	}
	if resp.Succeeded {
		h := newHolding(entry, resp.Header.Revision, lease, granted)
		return Grant{Token: uint64(h.rev), TTL: seconds(granted), Handle: h}, nil
	}
	d.revokeDetached(ctx, lease)
	first := resp.Responses[0].GetResponseRange().Kvs
	if len(first) == 1 && foreign(first[0]) {
		return Grant{}, conflict(r.Key, first[0])
	}
	return Grant{}, &BusyError{Remaining: d.remaining(ctx, first), RetryAfter: -1}
}

// enqueue makes sure the waiter's entry exists (writing it on the first attempt,
// or again if its lease ran out), renews its lease, and grants the lock when the
// entry is the oldest.
func (d *Driver) enqueue(ctx context.Context, r AcquireRequest, secs int64, h *holding) (Grant, error) {
	entry, qp := EntryKey(r.Key, r.Owner), QueuePrefix(r.Key)
	var (
		first   []*mvccpb.KeyValue
		granted int64
		ok      bool
		err     error
	)
	if h != nil && h.entry == entry {
		// Renew first: a lease renewed before the check that finds the entry
		// oldest is good for its whole TTL from the start of this attempt.
		rev, lease, _ := h.state()
		granted, err = d.keepAlive(ctx, lease)
		switch {
		case errors.Is(err, dlock.ErrNotHeld):
			// The lease ran out while waiting: write the entry anew below.
		case err != nil:
			return Grant{}, err
		default:
			resp, err := d.cli.Txn(ctx).
				If(clientv3.Compare(clientv3.CreateRevision(entry), "=", rev)).
				Then(clientv3.OpGet(qp, clientv3.WithFirstCreate()...)).
				Commit()
			if err != nil {
				return Grant{}, mapErr(err)
			}
			if ok = resp.Succeeded; ok {
				first = resp.Responses[0].GetResponseRange().Kvs
				h.set(rev, lease, granted)
			} else {
				d.revokeDetached(ctx, lease) // it carries nothing now
			}
		}
	} else {
		h = nil
	}
	if !ok {
		if h, granted, first, err = d.join(ctx, r, secs, h); err != nil {
			return Grant{}, err
		}
	}
	rev, _, _ := h.state()
	if len(first) == 1 && first[0].CreateRevision == rev {
		return Grant{Token: uint64(rev), TTL: seconds(granted), Handle: h}, nil
	}
	if len(first) == 1 && foreign(first[0]) {
		_ = d.abandonDetached(ctx, h)
		return Grant{}, conflict(r.Key, first[0])
	}
	return Grant{}, &BusyError{
		Remaining:  d.remaining(ctx, first),
		RetryAfter: seconds(granted) / 3,
		Handle:     h,
	}
}

// join writes the waiter's entry with a fresh lease, or adopts the entry of this
// owner that an earlier attempt wrote but lost track of (its reply was lost). It
// updates h in place when given, so that a subscription sees the new position.
func (d *Driver) join(ctx context.Context, r AcquireRequest, secs int64, h *holding) (*holding, int64, []*mvccpb.KeyValue, error) {
	entry, qp := EntryKey(r.Key, r.Owner), QueuePrefix(r.Key)
	lease, granted, err := d.grantLease(ctx, secs)
	if err != nil {
		return nil, 0, nil, err
	}
	resp, err := d.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(entry), "=", 0)).
		Then(clientv3.OpPut(entry, r.Metadata, clientv3.WithLease(lease)), clientv3.OpGet(qp, clientv3.WithFirstCreate()...)).
		Else(clientv3.OpGet(entry), clientv3.OpGet(qp, clientv3.WithFirstCreate()...)).
		Commit()
	if err != nil {
		d.revokeDetached(ctx, lease)
		return nil, 0, nil, mapErr(err)
	}
	first := resp.Responses[1].GetResponseRange().Kvs
	rev := resp.Header.Revision
	if !resp.Succeeded {
		d.revokeDetached(ctx, lease)
		own := resp.Responses[0].GetResponseRange().Kvs
		if len(own) != 1 {
			return nil, 0, nil, fmt.Errorf("%w: etcd: entry %q vanished during a transaction", dlock.ErrUnavailable, entry)
		}
		if foreign(own[0]) {
			return nil, 0, nil, conflict(r.Key, own[0])
		}
		rev, lease = own[0].CreateRevision, clientv3.LeaseID(own[0].Lease)
		if granted, err = d.keepAlive(ctx, lease); err != nil {
			return nil, 0, nil, err
		}
	}
	if h == nil {
		h = newHolding(entry, rev, lease, granted)
	} else {
		h.set(rev, lease, granted)
	}
	return h, granted, first, nil
}

// remaining returns the lease time left of the entry in first (the holder), or
// -1 when unknown.
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
	return seconds(resp.TTL)
}

// Extend keeps the holding for at least ttl (rounded up to whole seconds) from
// the start of the call, and returns the TTL granted. With the TTL already
// granted it renews the lease; with another it moves the entry to a new lease,
// keeping its create revision (the fencing token). It returns an error matching
// dlock.ErrNotHeld when the lease or the entry is gone.
func (d *Driver) Extend(ctx context.Context, hd Holding, ttl time.Duration) (time.Duration, error) {
	h, err := d.holdingOf(ctx, hd)
	if err != nil {
		return 0, err
	}
	secs := leaseSeconds(ttl)
	rev, lease, cur := h.state()
	if secs == cur {
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
	h.set(rev, next, granted)
	d.revokeDetached(ctx, lease) // holds nothing now; it would expire anyway
	return seconds(granted), nil
}

// Release deletes the holding's entry if it is still the one written for it
// (same create revision), and revokes its lease. It returns an error matching
// dlock.ErrNotHeld, and touches no other entry, when the entry is gone.
func (d *Driver) Release(ctx context.Context, hd Holding) error {
	h, err := d.holdingOf(ctx, hd)
	if err != nil {
		return err
	}
	deleted, err := d.remove(ctx, h)
	if err != nil {
		return err
	}
	if !deleted {
		return notHeld(hd.Key)
	}
	return nil
}

// Abandon removes a waiter's entry at once, so that the waiters behind it move
// up. An entry already gone is not an error.
func (d *Driver) Abandon(ctx context.Context, hd Holding) error {
	h, err := d.holdingOf(ctx, hd)
	if errors.Is(err, dlock.ErrNotHeld) {
		return nil
	}
	if err != nil {
		return err
	}
	_, err = d.remove(ctx, h)
	return err
}

// remove deletes h's entry if its create revision is unchanged, then revokes
// its lease, and reports whether the entry was deleted.
func (d *Driver) remove(ctx context.Context, h *holding) (bool, error) {
	rev, lease, _ := h.state()
	resp, err := d.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(h.entry), "=", rev)).
		Then(clientv3.OpDelete(h.entry)).
		Commit()
	if err != nil {
		return false, mapErr(err)
	}
	// The lease carries this entry only: revoking it touches nothing else. When
	// the revocation fails, the lease (carrying nothing now) expires on its own.
	_, _ = d.cli.Revoke(ctx, lease)
	return resp.Succeeded, nil
}

func (d *Driver) abandonDetached(ctx context.Context, h *holding) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	_, err := d.remove(cctx, h)
	return err
}

// TTL returns the lease time left on the holding as the server reports it, in
// whole seconds rounded down. It returns an error matching dlock.ErrNotHeld when
// the lease is gone or no longer carries the holding's entry.
func (d *Driver) TTL(ctx context.Context, hd Holding) (time.Duration, error) {
	h, err := d.holdingOf(ctx, hd)
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
			return seconds(resp.TTL), nil
		}
	}
	return 0, notHeld(hd.Key)
}

// holdingOf returns the holding state of hd: its Handle, or when that is nil the
// entry of hd.Owner read from the server (a clean-up after an attempt whose
// reply was lost).
func (d *Driver) holdingOf(ctx context.Context, hd Holding) (*holding, error) {
	if err := checkOwner(hd.Owner); err != nil {
		return nil, err
	}
	h, err := handleOf(hd.Handle)
	if err != nil || h != nil {
		return h, err
	}
	entry := EntryKey(hd.Key, hd.Owner)
	resp, err := d.cli.Get(ctx, entry)
	if err != nil {
		return nil, mapErr(err)
	}
	if len(resp.Kvs) == 0 {
		return nil, notHeld(hd.Key)
	}
	kv := resp.Kvs[0]
	if foreign(kv) {
		return nil, conflict(hd.Key, kv)
	}
	return newHolding(entry, kv.CreateRevision, clientv3.LeaseID(kv.Lease), 0), nil
}

func handleOf(v any) (*holding, error) {
	if v == nil {
		return nil, nil
	}
	h, ok := v.(*holding)
	if !ok || h == nil {
		return nil, fmt.Errorf("%w: handle of type %T is not an etcdlock handle", dlock.ErrInvalid, v)
	}
	return h, nil
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
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	_, _ = d.cli.Revoke(cctx, lease)
}

// leaseSeconds rounds ttl up to whole seconds, at least one.
func leaseSeconds(ttl time.Duration) int64 {
	s := int64((ttl + time.Second - 1) / time.Second)
	return max(s, 1)
}

func seconds(s int64) time.Duration { return time.Duration(s) * time.Second }

// checkOwner rejects owner tokens that cannot be the last element of an entry key.
func checkOwner(owner string) error {
	if owner == "" || strings.ContainsAny(owner, "/{}") || dlock.ValidateKey(owner) != nil {
		return fmt.Errorf("%w: owner %q", dlock.ErrInvalid, owner)
	}
	return nil
}

// foreign reports whether kv, found among a lock's entries, was not written by
// this package: every entry has a lease.
func foreign(kv *mvccpb.KeyValue) bool { return kv.Lease == 0 }

func conflict(key string, kv *mvccpb.KeyValue) error {
	return fmt.Errorf("%w: etcd key %q of lock %q has no lease", dlock.ErrConflict, kv.Key, key)
}

func notHeld(key string) error {
	return fmt.Errorf("%w: %q is not held by this owner", dlock.ErrNotHeld, key)
}
