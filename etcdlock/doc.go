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
// Every entry is attached to an etcd lease of its Driver, one lease per TTL in
// whole seconds (see Driver.TTLLimits: the Client rounds a TTL up to the next
// second), shared by all of the Driver's entries of that TTL, as an etcd
// concurrency.Session shares one lease among its locks. The lease is granted
// with the TTL plus a third (etcd raises a shorter TTL to its minimum, 1.5
// election timeouts); it is granted by the Driver's first entry of that TTL and
// renewed, one LeaseKeepAlive for all the entries on it, only when an entry is
// written or renewed and the lease has less than the TTL left: at most once per
// third of the TTL, whatever the number of locks. So an acquisition is one
// transaction (it puts the entry and reads the entry just ahead of it, if
// any: the lock is free when there is none), a release one
// transaction (it deletes the entry if it is still the holding's), and Extend
// one transaction (it checks that the entry is still the holding's, or moves it
// to the lease of another TTL, keeping its create revision); the lease
// renewals come on top, shared.
//
// Each entry keeps its own deadline: the start of its last write or renewal
// plus its TTL. The Client releases a lock whose renewals stopped (a fixed
// lease, the MaxHold cap) at its local deadline; if that release fails, the
// Driver removes the entry before it renews the lease past the entry's
// deadline, so a lock whose holder stopped renewing it ends at its own TTL
// even while its Driver's other locks are renewed. A lock whose whole process
// stops (or is cut off) ends when the lease expires: at most the TTL plus a
// third after the last renewal. A lease that is gone (expired while the
// process was paused, revoked by an administrator) takes every entry on it:
// when the Driver learns of it (a renewal or a write refused), every Lease on
// it is lost at once (driver.Grant.Lost), and the Driver grants a new lease for
// the next locks. Driver.Close revokes the Driver's leases; without it, they
// expire on their own. A holding handed over (dlock.Lease.Detach) stays on
// its Driver's lease, ending as a holding whose renewals stopped, until a
// Resume (Driver.Resume, in any process) moves its entry to the resuming
// Driver's lease, keeping its create revision: a Close before then ends it. While it holds locks, a Driver also keeps one watch
// (not one per lock) on the deletions under Prefix: a holder whose entry is
// deleted (a force-unlock, another client's delete) loses its Lease at once,
// with dlock.LossStoreSignal as its Observer's cause.
//
// # Waiting
//
// A waiter (Lock) writes its entry on its first attempt and keeps it across
// attempts: the entry is its handle. Each attempt is one transaction that
// also reads the entry just older than the waiter's own (its predecessor),
// and the waiter waits watching only that key, so a release wakes one waiter
// and never a herd; when the predecessor goes, the waiter's next attempt takes
// the lock if no older entry is left, and otherwise reads and watches the next
// older one (entries leave in order unless a waiter gives up, so that is rare).
// A hand-over is thus the holder's release, one watch created and one attempt
// of the waiter, beyond the waiter's first attempt. Each attempt renews the
// waiter's own deadline, and a busy attempt asks to be retried after a third of
// the TTL without a wake. A waiter that gives up removes its entry at once,
// and marks its acquisition abandoned (see Driver.Abandon) so that an attempt
// still in flight cannot write it again. TryLock does not queue: it writes its
// entry only if the queue is empty, in one transaction, and leaves nothing
// behind otherwise.
//
// # What is guaranteed
//
// etcd orders every write in one linearizable history, so two entries never
// share a place and a holder is always the oldest live entry. A lease expires
// on the server no earlier than its TTL after the server received the request
// that granted or renewed it, which is after the start of the round trip the
// Driver counts from; an acquisition or Extend proceeds only when the shared
// lease, so counted, has at least the lock's TTL left from the start of the
// call (renewing it first otherwise), which is after the start the holder's
// local deadline counts from. A new leader extends every lease rather than
// shortening it. Fencing tokens are create revisions: global, strictly
// increasing across leader changes and restarts, never reused after a
// compaction. Only restoring the cluster from an older snapshot sets revisions
// back. As with every backend, a holder paused past its deadline may act after
// the lock passed on; a resource that checks tokens rejects it.
//
// A Driver holds no connection of its own: the caller creates the etcd client,
// shares it, and closes it after the last lock is released (and after
// Driver.Close, which revokes the Driver's leases over it).
package etcdlock
