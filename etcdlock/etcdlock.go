// Package etcdlock is dlock's etcd backend: exclusive leases with fencing tokens
// on an etcd cluster (etcd 3.4 or later), through the caller's
// go.etcd.io/etcd/client/v3 client. It is a module of its own, so that programs
// using only the Redis backend do not build etcd's client.
//
//	cli, _ := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}})
//	locker, _ := etcdlock.New(cli)
//	lease, err := locker.Lock(ctx, "orders:42")
//
// # Layout
//
// Every contender for the lock named KEY writes one entry, "dlock/{KEY}/OWNER",
// whose value is its metadata and whose create revision is its place in the
// queue and, once it holds the lock, its fencing token: the entry with the
// lowest create revision holds the lock. Lock names cannot contain '{' or '}',
// so the queue of "a" never contains entries of "a/x". Every entry is attached
// to a lease; no entry exists without one, and an entry without a lease under
// a lock's prefix is foreign data (dlock.ErrConflict).
//
// # Leases
//
// Each holding (and each waiter's entry) has a lease of its own, granted with
// the holding's TTL in whole seconds (see Driver.TTLLimits: the Client rounds a
// TTL up to the next second); etcd raises a shorter TTL to its minimum (1.5
// election timeouts, rounded up: 2s with default settings), and the TTL the
// server granted is the one the lease's deadline uses. A lease per holding
// rather than one per process (etcd's concurrency.Session) because dlock
// negotiates the TTL per lock and renews, caps (WithMaxHold) and re-times
// (Extend) each lock on its own: with its own lease the server forgets exactly
// that lock when its renewals stop, a lost lease loses one lock and not all of a
// process's locks, Extend to a new TTL moves the entry to a fresh lease without
// changing its create revision, and Release revokes the lease, so no lease
// outlives its lock. The price is one LeaseGrant per acquisition and one
// LeaseRevoke per release. Extend with the TTL already granted is one
// KeepAliveOnce; a lease that is gone means the lock is lost (dlock.ErrNotHeld).
//
// # Waiting
//
// A waiter (Lock) writes its entry on its first attempt and keeps it across
// attempts: the entry is its handle. It waits watching only its predecessor,
// the entry created just before its own, so a release wakes one waiter and
// never a herd; when the predecessor goes, the waiter holds the lock if no older
// entry is left, and otherwise watches the next older one. Each attempt renews
// the waiter's lease, and a busy attempt asks to be retried after a third of the
// lease TTL without a wake, so the entry of a waiter that died disappears within
// one TTL. A waiter that gives up removes its entry at once, and marks its
// acquisition abandoned (see Driver.Abandon) so that an attempt still in flight
// cannot write it again. TryLock does not queue: it writes its entry only if the
// queue is empty, in one transaction, and leaves nothing behind otherwise.
//
// # What is guaranteed
//
// etcd orders every write in one linearizable history, so two entries never
// share a place and a holder is always the oldest live entry. A lease expires
// on the server no earlier than its TTL after the server received the request
// that granted or renewed it, which is after the start of the round trip the
// holder's local deadline counts from; a new leader extends every lease rather
// than shortening it. Fencing tokens are create revisions: global, strictly
// increasing across leader changes and restarts, never reused after a
// compaction. Only restoring the cluster from an older snapshot sets revisions
// back. As with every backend, a holder paused past its deadline may act after
// the lock passed on; a resource that checks tokens rejects it.
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
	"github.com/dlock-go/dlock/internal/bounded"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Prefix starts every key dlock writes to etcd.
const Prefix = "dlock/"

// DefaultRequestTimeout bounds each call of a Driver (one acquisition attempt,
// one extend, release, TTL or abandon) unless WithRequestTimeout says otherwise.
const DefaultRequestTimeout = 5 * time.Second

// QueuePrefix returns the etcd key prefix of the entries of the lock named key.
func QueuePrefix(key string) string { return Prefix + "{" + key + "}/" }

// EntryKey returns the etcd key of owner's entry for the lock named key.
func EntryKey(key, owner string) string { return QueuePrefix(key) + owner }

// AbandonKey returns the etcd key that marks owner's acquisition of the lock
// named key as abandoned (see Driver.Abandon). It lies outside every queue.
func AbandonKey(key, owner string) string { return Prefix + "abandoned/{" + key + "}/" + owner }

// The mark of an abandoned acquisition (see Driver.Abandon) lives the
// acquisition's TTL plus the request timeout, in whole seconds: an attempt of the
// acquisition still in flight when it was abandoned cannot write its entry while
// the mark lives. An attempt can write only while the lease it was granted lives,
// a lease granted at most a request timeout after the abandonment (the attempt
// gives up by then) lives at most the TTL (or etcd's minimum TTL, which the mark's
// own lease is raised to as well), so the mark outlives every such attempt, and
// nothing of the abandoned acquisition outlives it.

// Client is the dlock.Client an etcdlock constructor returns: a dlock.Locker on
// etcd, and a dlock.Inspector through its Driver. It is safe for concurrent use.
type Client = dlock.Client

// New returns a Client that locks through cli, with the default request
// timeout (NewClient takes a Driver made with options). opts become the
// defaults of every TryLock and Lock; TTLs are whole seconds, at least one (see
// Driver.TTLLimits), and the default TTL is dlock.DefaultTTL. It returns an
// error matching dlock.ErrInvalid for a nil client or a bad option; it does no
// I/O.
func New(cli *clientv3.Client, opts ...dlock.Option) (*dlock.Client, error) {
	d, err := NewDriver(cli)
	if err != nil {
		return nil, err
	}
	return NewClient(d, opts...)
}

// NewClient returns a Client over d, with opts as the defaults of every TryLock
// and Lock. It returns an error matching dlock.ErrInvalid for a nil driver or a
// bad option.
func NewClient(d *Driver, opts ...dlock.Option) (*dlock.Client, error) {
	if d == nil {
		return nil, fmt.Errorf("%w: nil etcdlock driver", dlock.ErrInvalid)
	}
	return dlock.NewClient(d, opts...)
}

// Driver is the etcd implementation of dlock's backend contract: single attempts
// of acquire, extend, release and TTL, plus wake-ups for waiters, abandonment of
// a waiter's entry, and inspection. Most users want New instead.
type Driver struct {
	cli     *clientv3.Client
	timeout time.Duration // per call
	wakes   atomic.Int64  // wake-ups sent to waiters, for tests
}

var (
	_ dlock.Driver     = (*Driver)(nil)
	_ dlock.TTLLimiter = (*Driver)(nil)
	_ dlock.Notifier   = (*Driver)(nil)
	_ dlock.Abandoner  = (*Driver)(nil)
	_ dlock.Inspector  = (*Driver)(nil)
)

// Option configures a Driver.
type Option func(*Driver) error

// WithRequestTimeout bounds each call of the Driver: one acquisition attempt
// (TryLock is one), one extend, release, TTL or abandon, each of which takes a
// few round trips. A call that etcd has not answered by then, because the
// cluster is down, hung, cut off or has no leader, fails with an error matching
// dlock.ErrUnavailable, whatever the caller's context allows (without a bound,
// etcd's client waits for a connection for as long as the context lets it).
// The caller's context still ends a call sooner. A TryLock that meets such a
// cluster returns after the timeout plus its clean-up (at most the shorter of
// the timeout and 2s). The default is DefaultRequestTimeout (5s); d must be
// positive. Keep it well below the TTLs used: a renewal that takes longer than
// the lease's remaining validity cannot save it anyway.
func WithRequestTimeout(d time.Duration) Option {
	return func(dr *Driver) error {
		if d <= 0 {
			return fmt.Errorf("%w: etcdlock: request timeout %v must be positive", dlock.ErrInvalid, d)
		}
		dr.timeout = d
		return nil
	}
}

// NewDriver returns the etcd driver over cli. It returns an error matching
// dlock.ErrInvalid for a nil client or a bad option; it does no I/O.
func NewDriver(cli *clientv3.Client, opts ...Option) (*Driver, error) {
	if cli == nil {
		return nil, fmt.Errorf("%w: nil etcd client", dlock.ErrInvalid)
	}
	d := &Driver{cli: cli, timeout: DefaultRequestTimeout}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: etcdlock: nil option", dlock.ErrInvalid)
		}
		if err := o(d); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// RequestTimeout returns the bound of each call (see WithRequestTimeout).
func (d *Driver) RequestTimeout() time.Duration { return d.timeout }

// request bounds one call of the Driver by the request timeout: a call cut
// short by it (not by the caller's context) is etcd not answering,
// dlock.ErrUnavailable. The call passes its error through done.
func (d *Driver) request(ctx context.Context) (context.Context, func(error) error) {
	return bounded.Call(ctx, d.timeout, "etcd")
}

// TTLLimits returns the lease times etcd can grant: whole seconds, at least one.
// The server may grant more than asked (its minimum TTL); the granted TTL is
// reported in every Grant and Extend.
func (d *Driver) TTLLimits() dlock.TTLLimits {
	return dlock.TTLLimits{Min: time.Second, Max: dlock.MaxTTL, Step: time.Second}
}

// holding is the Handle of an entry: a holding or a waiter's queue position.
type holding struct {
	entry string

	mu    sync.Mutex
	rev   int64            // create revision: the place in the queue and the fencing token
	lease clientv3.LeaseID // the entry's lease
	asked int64            // the TTL the lease was asked for, in seconds; 0 when unknown
	moved chan struct{}    // closed when rev changes (the entry was written anew)

	// The start of the last grant or renewal of the lease that succeeded, and
	// the TTL it granted: the lease lives at least that long from then.
	renewed time.Time
	granted int64
}

func newHolding(entry string, rev int64, lease clientv3.LeaseID, asked int64) *holding {
	return &holding{entry: entry, rev: rev, lease: lease, asked: asked, moved: make(chan struct{})}
}

func (h *holding) state() (rev int64, lease clientv3.LeaseID, asked int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rev, h.lease, h.asked
}

// watchState returns the revision and a channel closed when it changes.
// replace takes over the state of n, a new entry written for the same owner.
func (h *holding) replace(n *holding) {
	rev, lease, asked := n.state()
	n.mu.Lock()
	renewed, granted := n.renewed, n.granted
	n.mu.Unlock()
	h.set(rev, lease, asked)
	h.renewal(renewed, granted)
}

// renewal records a grant or renewal of the lease that started at start.
func (h *holding) renewal(start time.Time, granted int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.renewed, h.granted = start, granted
}

// left is the lease time left that the last renewal guarantees, or 0.
func (h *holding) left() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.renewed.IsZero() {
		return 0
	}
	return seconds(h.granted) - time.Since(h.renewed)
}

func (h *holding) revision() int64 {
	rev, _, _ := h.state()
	return rev
}

func (h *holding) watchState() (int64, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rev, h.moved
}

func (h *holding) set(rev int64, lease clientv3.LeaseID, asked int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if rev != h.rev {
		close(h.moved)
		h.moved = make(chan struct{})
	}
	h.rev, h.lease, h.asked = rev, lease, asked
}

// Acquire implements dlock.Driver: one attempt to take r.Key for r.Owner. When
// another owner holds the lock it returns a *dlock.BusyError; a waiting request
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
	var prev *holding // the waiter's handle, kept when its entry is written anew
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
	busy := &dlock.BusyError{Remaining: d.remaining(ctx, first)}
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
func (d *Driver) recheck(ctx context.Context, r dlock.AcquireRequest, h *holding) (*holding, int64, []*mvccpb.KeyValue, error) {
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
func (d *Driver) write(ctx context.Context, r dlock.AcquireRequest, secs int64) (*holding, int64, []*mvccpb.KeyValue, error) {
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
		h := newHolding(entry, resp.Header.Revision, lease, secs)
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
	h := newHolding(entry, old.CreateRevision, lease, secs)
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
	h, err := d.holdingOf(ctx, hd)
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

// Release deletes the holding's entry if it is still the one written for it
// (same create revision), and revokes its lease. It returns an error matching
// dlock.ErrNotHeld, and touches no other entry, when the entry is gone.
func (d *Driver) Release(ctx context.Context, hd dlock.Holding) error {
	ctx, done := d.request(ctx)
	return done(d.release(ctx, hd))
}

func (d *Driver) release(ctx context.Context, hd dlock.Holding) error {
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

// Abandon implements dlock.Abandoner: it removes owner's entry, whether it holds
// the lock or waits (so the waiters behind it move up at once), and in the same
// transaction marks the acquisition abandoned for its TTL plus the request
// timeout, so that an attempt of it still in flight cannot write the entry
// again. An entry already gone is not an error.
func (d *Driver) Abandon(ctx context.Context, hd dlock.Holding) error {
	ctx, done := d.request(ctx)
	return done(d.abandon(ctx, hd))
}

func (d *Driver) abandon(ctx context.Context, hd dlock.Holding) error {
	if err := checkOwner(hd.Owner); err != nil {
		return err
	}
	h, err := handleOf(hd.Handle)
	if err != nil {
		return err
	}
	entry, gone := EntryKey(hd.Key, hd.Owner), AbandonKey(hd.Key, hd.Owner)
	mark, _, err := d.grantLease(ctx, leaseSeconds(max(hd.TTL, time.Second)+d.timeout))
	if err != nil {
		return err
	}
	resp, err := d.cli.Txn(ctx).
		Then(clientv3.OpPut(gone, "", clientv3.WithLease(mark)), clientv3.OpDelete(entry, clientv3.WithPrevKV())).
		Commit()
	if err != nil {
		d.revokeDetached(ctx, mark)
		return mapErr(err)
	}
	// The entry's lease (and the handle's, if another) carry nothing now:
	// revoke them rather than let them expire.
	var leases []clientv3.LeaseID
	for _, kv := range resp.Responses[1].GetResponseDeleteRange().PrevKvs {
		leases = append(leases, clientv3.LeaseID(kv.Lease))
	}
	if h != nil {
		_, lease, _ := h.state()
		leases = append(leases, lease)
	}
	for i, lease := range leases {
		if lease != 0 && (i == 0 || lease != leases[0]) {
			_, _ = d.cli.Revoke(ctx, lease)
		}
	}
	return nil
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

// removeDetached is remove on a context detached from ctx's cancellation: the
// clean-up of an attempt that wrote an entry it must not keep.
func (d *Driver) removeDetached(ctx context.Context, h *holding) error {
	cctx, cancel := dlock.CleanupContext(ctx)
	defer cancel()
	_, err := d.remove(cctx, h)
	return err
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
			return max(seconds(resp.TTL), min(h.left(), seconds(resp.TTL+1))), nil
		}
	}
	return 0, notHeld(hd.Key)
}

// holdingOf returns the holding state of hd: its Handle, or when that is nil the
// entry of hd.Owner read from the server (a clean-up after an attempt whose
// reply was lost).
func (d *Driver) holdingOf(ctx context.Context, hd dlock.Holding) (*holding, error) {
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
