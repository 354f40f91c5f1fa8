// Package zklock is dlock's ZooKeeper backend: a driver.Driver that keeps locks as
// ephemeral sequential znodes, the lock recipe of the ZooKeeper documentation made
// safe against lost replies. It lives in a module of its own, so that programs
// that use only the Redis backend never build the ZooKeeper client.
//
//	drv, err := zklock.NewDriver(ctx, []string{"zk1:2181", "zk2:2181", "zk3:2181"})
//	if err != nil { ... }
//	defer drv.Close() // ends the session: every lock it holds is released
//	locker, err := zklock.NewClient(drv)
//	lease, err := locker.Lock(ctx, "orders:42")
//
// # Layout
//
// A lock named key is the znode Root/<key escaped> (see WithRoot; the escape
// keeps a key with '/' in one path component). It is a container node: the
// server removes it some time after its last child has gone. Each contender
// creates an ephemeral sequential child lock-<owner>-<sequence>, whose data holds
// the TTL and the metadata. The child with the lowest sequence holds the lock;
// every other waits for the deletion of the child just before its own (a watch
// on its predecessor only, so a release wakes one waiter, not all of them). The
// watches survive reconnects, so a waiter polls only once a sixth of its TTL
// (BusyError.RetryAfter), to rewrite its node. TryLock does not queue: it reads
// the queue and creates nothing when the lock is held; on a free lock it
// creates its child, and deletes it again at once when another came first.
//
// # Requests
//
// An uncontended Lock and Unlock is three requests, the store's minimum: a
// create, a read of the queue and a delete. The create goes in a multi with an
// empty write of the node Root/%clock, so that its reply carries the
// transaction's zxid, the token (see below), without a read of the child. A
// waiter queues with the same create and read and a watch on its predecessor,
// set by the same attempt: a data watch on the holder (its renewals bring its
// TTL along, which the waiter needs to remove a holder past its TTL) and a
// child watch on another waiter (which that waiter's rewrites do not fire).
// The predecessor's deletion wakes the waiter, which reads the queue once more
// and, first, holds the lock without writing (see the TTL below): a hand-over
// is the release's delete and that read, five requests per critical section
// in all. A waiter whose predecessor gave up is woken as well, and watches the
// next one. TestRequestsPerOperation counts them.
//
// # Fencing tokens
//
// The token of a holding is its child's czxid, the transaction id of the create:
// ZooKeeper's zxids increase strictly across the whole ensemble, also across
// leader elections, and a later holder's child was created after every earlier
// holder's. The sequence number in the child's name would not do: it is a
// counter of the parent node, and starts again at 0 when the (container) parent
// is removed and made again, and it is a signed 32-bit number.
//
// # TTL and the session
//
// ZooKeeper has no TTL per lock: an ephemeral node lives as long as the session
// that created it. A Driver has one session, with the timeout set by
// WithSessionTimeout and negotiated with the server, which clamps it into its
// [minSessionTimeout, maxSessionTimeout] (by default 2 and 20 ticks). The lock
// TTL maps onto it like this:
//
//   - A TTL can be at most the negotiated session timeout (TTLLimits). The
//     server expires a session only when it has heard nothing from the client for
//     the timeout, and every Acquire and Extend is a request in the session, so
//     a child lives at least the session timeout after the start of the call
//     that granted its TTL: the holder's local deadline (start + TTL − drift)
//     comes first, also when the holder is paused or cut off.
//   - A TTL shorter than the session timeout bounds how long the holder may
//     trust the lock without renewing it, as on every backend: at the local
//     deadline the lease ends and the Client deletes the child. Extend rewrites
//     the child's data (the new TTL), which succeeds only while the child exists
//     and the session is alive, and the write's time is what other clients use
//     to tell the TTL left (BusyError.Remaining, TTL, Inspect).
//   - A holder that crashes or stops answering blocks the lock for its TTL,
//     not for the session timeout: a node whose last write (its mtime) is
//     more than its TTL ago is dead, and the next attempt of another owner
//     that finds it first in the queue deletes it (unless it was written in
//     between). Both times come from the server's clock: the attempt learns
//     the server's time from a write of its own (the lock node's mtime), so
//     the clocks of the clients do not matter, only that the servers of the
//     ensemble agree on the time (within the drift margin), since a new leader
//     stamps writes with its own clock. The holder's local deadline comes
//     first, as on every backend: it counts from before the write. Waiters
//     rewrite their own node every sixth of their TTL, with the TTL plus a
//     third in its data, so a live waiter's node is never taken for a dead
//     one, and the node of a waiter that died goes the same way. A waiter
//     that becomes first holds the lock on that last write, which is less
//     than a third of the TTL old and so outlives the lease by its data; its
//     first renewal writes the TTL alone. A holder that dies before its first
//     renewal thus blocks the lock up to 4/3 of its TTL, no longer than one
//     that dies just after it (the watchdog renews every third of the TTL).
//     A TryLock's node carries the TTL alone. A holder that closes its
//     Driver frees its locks at once, and the session timeout still bounds
//     every node, also one whose data is not dlock's.
//   - A session that expires takes its nodes with it: the holder's Lease is
//     lost as soon as the client hears of the expiry (at its first contact
//     with the server after it), not at its next renewal (driver.Grant.Lost).
//
// dlock.DefaultTTL (15s, renewed) needs a session timeout of at least 15s, the
// default of WithSessionTimeout; a server clamps it lower only with a tick under
// 750ms or an explicit maxSessionTimeout. Give a shorter dlock.WithTTL then.
//
// # Lost replies
//
// A create whose reply is lost (ZOOKEEPER-1262) must not leave an orphan that
// holds the lock for the life of the session. The owner token is in the child's
// name, as in Curator's protected mode: a retry with the same owner finds the
// child it made, and a Release or Abandon finds and deletes it. When even that
// cannot reach the server, the Driver remembers the owner and deletes its
// children as soon as the session is connected again.
//
// # Client
//
// The Go client is github.com/go-zookeeper/zk (v1.0.4), the maintained
// successor of samuel/go-zookeeper and the one Go ZooKeeper client in wide use:
// pure Go, sessions that survive reconnects, watches set again after a
// reconnect, container nodes (ZooKeeper 3.5.3 and later). Its calls take no
// context (the fork that added contexts, z-division/go-zookeeper, has not been
// released since 2019); the Driver runs each call in a goroutine and returns
// when the context ends, and the call itself ends when the server answers, the
// session's connection drops or the Driver is closed. The Driver remembers
// every unanswered call that changes an owner's nodes, and orders that owner's
// next calls after it.
package zklock
