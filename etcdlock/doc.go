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
