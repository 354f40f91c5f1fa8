// Package dlock is a distributed lock library for Go: one backend-neutral API
// over the stores services already run, with fencing tokens, leases renewed
// while the work runs, and a signal the moment a lock can no longer be
// guaranteed.
//
//	locker, _ := redislock.New(rdb)
//	err := dlock.Do(ctx, locker, "orders:42", func(ctx context.Context) error {
//		// ctx ends if the lock is lost: stop the protected work then.
//		return process(ctx)
//	})
//
// The backends: Redis (single, Sentinel, Cluster; package redislock), Redlock
// over independent Redis masters (redlock), etcd (etcdlock), ZooKeeper
// (zklock), a table in a PostgreSQL database (pglock), a table in a MySQL or
// MariaDB database (mysqllock), a NATS JetStream key-value bucket (natslock),
// the SETNX/GETSET protocol of older services (legacy) and an in-memory store
// for tests (memlock). etcdlock, zklock, pglock, mysqllock and natslock are
// modules of their own, so that programs using other backends never build
// their clients. Beyond the mutex: fair, reentrant, read-write and semaphore
// locks (Redis; fair and semaphore locks on PostgreSQL too, semaphores on
// MySQL), leader election (Campaign, and RunAsLeader to run
// work while leading), multi-key locks (LockAll) over any Locker, and
// countdown latches and barriers (Latch, Barrier).
//
// A Locker hands out a *Lease for a key: TryLock makes one attempt, Lock waits
// (bounded by its context and WithWait). The Lease carries the key, a fencing
// token that is strictly greater than every earlier token of that key, and a
// context that ends the moment the lock can no longer be guaranteed. Leases made
// with the default TTL are renewed by a watchdog until Unlock; Do wraps the whole
// cycle.
//
// # Waiting and failures
//
// Lock (and Do, LockAll, Campaign) waits while another owner holds the key, for
// as long as its context and WithWait allow. It also retries the failures that
// waiting may cure (ErrUnavailable: a server down, unreachable, out of memory,
// read-only, loading), but not forever: once every attempt for the failure
// limit (WithFailureLimit, DefaultFailureLimit = 1 minute) has failed with no
// reply saying the lock is held, the wait gives up with the last failure,
// matching ErrUnavailable and naming the server's reason. A wait that meets a
// failure logs it once through slog.Default (or WithLogger's logger), so that a
// process waiting through an outage says what it waits for. ErrRefused,
// ErrInvalid and ErrConflict end a wait at once.
//
// # Safety model
//
//  1. Every lock has a 128-bit random owner token and an expiry; no code path
//     creates a lock without one.
//  2. Unlock and Extend are atomic compare-and-act operations: only the owner can
//     release or extend, and a stale handle touches nothing (ErrNotHeld).
//  3. Every acquisition gets a fencing token, strictly increasing per key. Leases
//     cannot give exclusion under unbounded pauses (GC, SIGSTOP, VM freeze) or
//     failover; a resource that refuses tokens older than the newest it has seen
//     can.
//  4. The holder learns of a loss first: a lease's local deadline is the start of
//     its last successful acquire or extend round trip plus the TTL minus a drift
//     margin (1% of the TTL plus 2ms), on the monotonic clock. When no
//     renewal has succeeded by then, Done is closed, before the server lets anybody
//     else in.
//  5. Cancellation never leaves a lock behind: an acquisition that ends without
//     a lease after an attempt whose outcome is unknown is abandoned on a
//     detached, short context before the error returns. On Redis the abandon
//     releases the holding if an attempt landed and marks the acquisition, so an
//     attempt still in flight on another connection cannot take the lock after
//     it, whatever order the server sees them in. A lease lost on the local side
//     (its deadline passed) is released the same way after Done fires.
//
// # What each backend guarantees
//
// Redis (package redislock), one server or a Sentinel/Cluster master:
//   - Exclusion holds while the server keeps its data, its clock runs at a rate
//     within the drift factor, and the holder is not paused past its local
//     deadline between checking its lease and acting on it.
//   - A holder is told first: Done closes at its local deadline, measured on the
//     monotonic clock and, on Linux, also on CLOCK_BOOTTIME, so a suspended host
//     wakes up to a lost lease instead of a valid-looking one. Lease.Err checks the
//     deadline itself, so a resumed holder sees the loss at its first check.
//   - A restart without persistence, an eviction (maxmemory-policy other than
//     noeviction) or a failover to an asynchronous replica can drop a held lock:
//     another client may then acquire while the old holder still believes it
//     holds the lock, until its next renewal is refused. A pause of the holder
//     longer than the TTL (GC, SIGSTOP, VM freeze) has the same effect. Fencing
//     tokens still increase across all of these, since they never fall below the
//     server clock in microseconds; a resource that checks them (redislock.Fence
//     for Redis data, a fence_token column for SQL) rejects the old holder's
//     writes with ErrStaleToken.
//   - Tokens assume the server's wall clock never steps back by more than
//     redislock.FenceRetention while its counter is gone. A server clock that
//     jumps forward expires keys early, like an eviction.
//
// Redlock (package redlock), over N independent masters:
//   - Exclusion holds while a majority of the masters keeps its data and clocks
//     drift less than the drift factor; a master restarted without persistence
//     during a hold can give two holders (delay its restart by the longest TTL).
//   - Tokens are raised on the granting majority to the largest drawn, so any
//     two majorities' tokens are ordered.
//
// etcd (package etcdlock, a module of its own):
//   - Exclusion holds while a quorum of the cluster is up and the holder is not
//     paused past its local deadline; locks survive leader changes and restarts
//     (etcd persists), and leases run in whole seconds.
//   - Tokens are the lock keys' create revisions.
//
// ZooKeeper (package zklock, a module of its own):
//   - Exclusion holds while a quorum of the ensemble is up and the holder is not
//     paused past its local deadline; locks survive leader elections and the
//     restart of a minority of the servers.
//   - A lock's TTL is at most the session timeout, so the holder's local deadline
//     comes before the server can expire its session; a holder that crashes
//     blocks the lock for its TTL, not for the session timeout: the next
//     attempt that finds its node older than its TTL, by the server's clock,
//     deletes it.
//   - Tokens are the lock nodes' czxids: they increase across the ensemble, also
//     when a lock's node is removed and made again.
//
// PostgreSQL (package pglock, a module of its own), a table in one database:
//   - Exclusion holds while the server keeps its commits (fsync and
//     synchronous_commit on, the defaults) and the holder is not paused past its
//     local deadline; a lock is a row, not a session, so holdings survive
//     restarts and terminated connections. Expiry is read by the database's clock
//     alone.
//   - Tokens come from a sequence: small integers that increase across restarts.
//     A failover to an asynchronous replica can lose the latest grants and hand
//     their tokens out again; synchronous replication makes it as safe as a
//     restart.
//   - pglock.Fence checks a lease inside the caller's transaction and keeps the
//     key from changing hands until it ends, so the transaction's writes are
//     ordered before the next holder's.
//
// MySQL (package mysqllock, a module of its own; MariaDB too), an InnoDB table
// in one database:
//   - Exclusion holds while the server keeps its commits
//     (innodb_flush_log_at_trx_commit=1, the default) and the holder is not
//     paused past its local deadline; a lock is a row, not a session (unlike
//     GET_LOCK), so holdings survive restarts and broken connections. Expiry
//     is read by the server's clock alone.
//   - Tokens count the grants of each key in its row, in the statement that
//     grants: they increase across restarts. A failover to an asynchronous
//     replica can lose the latest grants and hand their tokens out again.
//   - mysqllock.Fence checks a lease inside the caller's transaction and keeps
//     the key from changing hands until it ends.
//
// NATS (package natslock, a module of its own), a JetStream key-value bucket
// with per-key TTLs (server 2.11 or later):
//   - Exclusion holds while the stream keeps its acknowledged writes; expiry
//     is the server's (TTLs in whole seconds). A Driver refuses a bucket
//     without per-key TTLs, in memory, or persisted asynchronously.
//   - Tokens are the key's revisions (stream sequences). They only grow if
//     the servers sync every write (jetstream sync_interval: always) and the
//     bucket has three replicas: under the default sync an OS crash can lose
//     acknowledged writes, and with them grants and their tokens.
//   - A holder whose key is deleted, purged or expired is told at once by a
//     watch of the key.
//   - The fair lock (NewFair) queues an entry per acquisition in a bucket of
//     its own; the oldest live entry holds, its first revision is the token,
//     and a hand-over is the holder's release alone. Semaphores
//     (NewSemaphore) are the same queue whose first n entries hold.
//
// docs/safety.md in the repository covers each fault and what answers it.
//
// All errors wrap the sentinels in this package (ErrNotObtained, ErrNotHeld,
// ErrLockLost, ErrReleased, ErrInvalid, ErrConflict, ErrUnavailable, ErrRefused,
// ErrStaleToken), a context error, or errors.ErrUnsupported (a backend without
// a capability, such as inspection), checked with errors.Is. Bad input is
// rejected before any I/O.
//
// Backends implement Driver (see its documentation and docs/backends.md); a
// Client runs the same algorithm over each of them.
package dlock
