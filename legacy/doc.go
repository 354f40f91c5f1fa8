// Package legacy lets Go services take part in the SETNX/GETSET timestamp lock
// that older Java, PHP and C++ services already use, and move a fleet off it.
//
//	// The old services lock "lock.<name>" with a millisecond stamp.
//	locker, _ := legacy.New(rdb, legacy.Format{Key: legacy.Prefix("lock.")}, dlock.WithTTL(10*time.Second))
//	err := dlock.Do(ctx, locker, "foo", func(ctx context.Context) error {
//		return process(ctx) // the old clients see lock.foo held meanwhile
//	})
//
// # The protocol
//
// The recipes this package speaks (Jedis and Spring RedisTemplate in Java,
// Predis with one Lua script in PHP, hiredis-style C++) lock a resource with a
// plain string key, such as "lock.foo" or "foo_lock", whose value is the time the
// lock runs out: a Unix timestamp in milliseconds or in seconds, plus one unit.
// A client takes the lock with SETNX; when the key exists it reads the stamp with
// GET and, if the stamp is in the past, takes the lock over with GETSET and keeps
// it only if GETSET returned the stamp it read. Unlock is a plain DEL.
//
// New returns a dlock Locker that shares such a lock with those clients: it
// reads and writes the same key with the same stamp format (Format), so the old
// clients see it held while a dlock lease holds it and dlock sees their holdings.
// What it does differently:
//
//   - Acquire, takeover and release are each one Lua script, so two takeovers
//     cannot interleave, a losing attempt writes nothing, and Unlock and Extend act
//     only while the key still holds the stamp this lease wrote and that stamp has
//     not run out (the recipes' DEL deletes whatever is there).
//   - The stamp carries no owner, so dlock keeps the owner, the stamp it wrote
//     and the fencing counter in a companion hash in the same Redis Cluster slot
//     (CompanionKey). A lease owns the lock while the companion names its owner
//     and the key holds exactly the stamp it wrote, not yet run out: the owner
//     tells dlock holdings apart, the stamp tells them from an old client's
//     takeover, which always writes a stamp above the run-out one it replaces.
//     An old client can write a stamp equal to a live dlock stamp only after the
//     key was deleted under it (the recipes' unchecked DEL) or with a skewed
//     clock, that is once exclusion is already broken, or as the loser of a
//     GETSET race in the same millisecond with the same timeout, and then nobody
//     else holds the lock and the stamp is the one the lease asked for. Stamps
//     therefore carry nothing to make them unique; random extra units would only
//     make locks last longer.
//   - Fencing tokens come from the companion hash (max(last+1, server time in
//     µs), as in redislock). They order the holdings of dlock lockers, so a
//     resource that checks them rejects a stale dlock holder. Legacy clients do
//     not draw tokens, so a resource fenced with them cannot tell a legacy holder
//     from nobody: fencing protects against paused dlock holders only.
//   - Format.Expire adds a real key expiry (SET PX) as a safety net, so that a
//     lock key left by a crashed process disappears even if no client ever looks
//     at its stamp again.
//
// What it cannot fix, because the old clients are part of the lock: a client
// whose clock runs ahead takes live locks; the old clients' takeover race moves
// the winner's stamp; their unlock deletes a successor's lock after they overran
// their own. docs/migrating-from-setnx.md in the repository shows each fault and
// the way off the protocol: NewBridge, then package redislock.
//
// # Time
//
// A stamp holds the lock until the current time in its unit has passed it: with
// stamp S and unit u, the lock is free from the instant (S+1)×u on. That is the
// strictest reading among the recipes (the Java and C++ code; the PHP script
// frees it one unit earlier), so dlock never takes over a lock that any of them
// still counts as held. dlock writes floor((now+ttl)/u)+1, the recipes' "+1", so
// every recipe sees the lock held for at least the lease's TTL. With seconds,
// the lock is held up to two seconds longer than the TTL; the lease's local
// deadline stays at the TTL, so the holder gives up first. Lease.TTL and the
// time a waiter sleeps count to the stamp less its extra unit while that lies
// ahead, then to the stamp's end, or to the key's real expiry (PTTL) when that
// comes first: the PHP recipe's takeover writes a stamp seconds beyond the
// EXPIRE it sets, and a waiter sleeping to that stamp would wake long after the
// key has gone and an old client has taken it.
//
// The clock is the local one by default (Format.Clock), as the old clients use;
// every client's clock must agree with the others' to well within the TTL.
// Format.ServerClock makes dlock's stamps use the Redis server clock instead,
// which keeps dlock lockers consistent with each other whatever their hosts'
// clocks say, but not with old clients on skewed hosts.
package legacy
