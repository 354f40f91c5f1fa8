// Package redlock is dlock's Redlock backend: exclusive leases with fencing tokens
// over N independent Redis masters (N odd, 5 typical), held while a majority of
// them hold the lock, so that the lock keeps working while a minority of the
// servers is down, slow or cut off.
//
//	nodes := []redis.UniversalClient{a, b, c, d, e} // five independent masters
//	locker, _ := redlock.New(nodes, dlock.WithTTL(10*time.Second))
//	err := dlock.Do(ctx, locker, "reports:nightly", func(ctx context.Context) error {
//		return process(ctx) // held on a majority, renewed on a majority
//	})
//
// Each server stores the lock exactly as the redislock package does (the same keys
// and Lua scripts), and every operation goes to all servers in parallel, each
// bounded by a per-node timeout well below the TTL (WithNodeTimeout):
//
//   - An acquisition succeeds only when a majority grants it. Its validity runs
//     from the start of the attempt: TTL minus the round trip minus the drift
//     margin (the Lease's local deadline), so a slow majority eats into it, and a
//     grant that arrives after its validity is refused. When no majority grants,
//     the servers that did are released at once, each only while it holds the
//     token it drew for that attempt: the next attempt takes a holding it finds
//     there anew, with a new token, so that a release delayed in the network
//     cannot remove it. The servers that did not answer are taken anew by the
//     next attempt, and abandoned when the acquisition ends without a lease.
//   - Fencing tokens strictly increase per key although no server holds the
//     truth: each server draws a token, the attempt takes the largest of the
//     majority's and records it on the majority before handing it out. Any two
//     majorities share a server, and that server's counter is above the earlier
//     token, so every later acquisition draws a greater one. The release records
//     the token on every server, so the servers draw the same next token and the
//     recording costs a round trip only when they did not (a lock taken for the
//     first time, or after a failed server): an uncontended lock and unlock cost
//     each server five commands, as on a single server.
//   - Extend must reach a majority, and never re-creates a lock on any server;
//     when a majority says the lock is gone, the lease is lost.
//   - Waiters subscribe on every server and wake on the first release message;
//     they never sleep past the holder's remaining time. A waiter keeps its
//     place in every server's waiting set for its whole wait, so that each
//     release wakes the longest waiting process of each server, and processes
//     with a Client each share a contended lock.
//
// # What Redlock guarantees, and what it does not
//
// Exclusion holds while the clocks of clients and servers run at nearly the same
// rate (within the drift margin, dlock.WithDriftFactor), while a majority of the
// servers stays up, and while no server forgets a lock it granted. A server that
// restarts without persistence forgets: if it was part of the holder's majority,
// another client can gather a new majority at once, and two clients hold the
// lock (the fencing token of the new holder is still greater, so a resource that
// checks tokens rejects the old holder's writes). Keep a restarted server out of
// service for longer than the longest TTL (delayed restart), or run it with
// appendfsync always. A Redis Cluster or Ring client given as a node is refused:
// it is not one independent master. Likewise the same server must not be listed
// twice, and the nodes must not replicate one another.
//
// Give every node client ContextTimeoutEnabled, so that the per-node timeout also
// ends the network read; otherwise a silent server holds a goroutine until the
// client's ReadTimeout (the attempt itself returns on time either way).
package redlock
