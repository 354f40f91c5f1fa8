// Package redislock is dlock's Redis backend: exclusive leases with fencing tokens
// on a single Redis server, a Sentinel-managed master or a Redis Cluster, through
// the caller's go-redis v9 client, or, for the plain and the fair lock, through
// another client behind a Transport (NewOver; module dlockrueidis has rueidis's
// and valkey-go's).
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
//	locker, _ := redislock.New(rdb, dlock.WithTTL(10*time.Second))
//	err := dlock.Do(ctx, locker, "orders:42", func(ctx context.Context) error {
//		return process(ctx) // runs alone, while the lease is renewed
//	})
//
// New's Example runs that against a local server. New gives the plain lock,
// NewFair a lock granted in arrival order, NewSemaphore N permits of one key,
// NewRWMutex readers or one writer, and NewReentrant a lock its holder may take
// again; NewClient makes locks over a Driver (NewDriver) with options such as
// waiting for replicas to acknowledge each write. NewInspector lists and
// force-unlocks locks, NewFence makes fenced writes to plain Redis keys, and
// NewOptimistic is compare-and-set on versioned values, without a lock. The
// constructors' Examples show each at work. The sections below describe how
// the locks are kept in Redis.
//
// # Layout
//
// A plain lock (New) or a fair one (NewFair) is one string "dlock:{KEY}" with an expiry, its lock record:
// a flag ('+' when somebody may wait, so that the release wakes them, '-'
// otherwise), the newest fencing token in base 36, and, while held, a space, the
// owner and the metadata ("-hogtzxbolw 49471f2330f1b291be93664c10c42b2c"). A
// release leaves the token alone in the record ("-hogtzxbolw") until the
// holding's TTL would have run out, so that the next acquisition counts on from
// it; without a record, tokens are drawn from the server clock in microseconds,
// which they stay below. An uncontended lock and unlock cost the server six
// commands (the two scripts, a read, the server clock and a write, and a write
// that returns the old record), and a held lock with an anonymous owner one key of at most 44
// bytes. The other kinds keep a hash at "dlock:{KEY}" (fields o = owner, t =
// fencing token, m = metadata, w = somebody may wait, and their kind's own) and
// a companion fence counter "dlock:{KEY}:fence". The hash tag keeps every key
// of a lock in one Cluster slot, so every script is single-slot. Acquire,
// extend and release are one Lua script each (one round trip), owner-checked,
// and no code path creates a lock key without an expiry. The scripts use SET …
// GET: Redis 6.2 or later.
//
// # Waiting
//
// Lock does not poll. A waiter's failed attempt marks the holding (the flag, or field w) and
// returns the holder's remaining TTL; the release of a marked holding publishes on
// a wake channel (see below), and the waiter sleeps until a message or
// that TTL, whichever comes first, so a crashed holder's lock is taken as soon as
// it expires and a lost message costs at most that. Each Client keeps one
// subscription connection (on Redis Cluster, one per master with sharded pub/sub,
// SSUBSCRIBE and SPUBLISH), shared by all its waiters on all keys; a key's channel
// is subscribed while the Client has waiters for it (and for a second after the
// last one leaves). When the subscription connection drops, go-redis reconnects
// and subscribes again, and the confirmation wakes every waiter to retry. With
// nobody waiting, a lock and unlock stay two round trips, with no subscription and
// no message.
//
// On Redis Cluster two cases are not recovered by a new subscription yet: a
// dropped subscription connection whose channels span several slots (go-redis
// subscribes them again in one SSUBSCRIBE, which the server refuses with
// CROSSSLOT: the refusal is logged and the waiters poll, as for an ACL
// refusal), and a slot that moves to another master (migration, failover) while
// waiters are subscribed on the old one (they wake at the holder's remaining
// TTL, as for a lost message). Exclusion is not affected. A
// go-redis ClusterClient also learns of a failover only from a MOVED reply or
// its ClusterOptions' state reload: keep that interval short where failovers
// happen, so that holders hear from the new master.
//
// The plain lock (New) is not fair but does not starve waiters, and the work of a
// hand-over does not grow with the number of waiting processes. A waiting
// process (a Client) joins the lock's waiting set "dlock:{KEY}:waiting" (a sorted
// set of Client ids by arrival) on its waiters' failed attempts, and each
// release wakes the process that has waited longest, alone: it takes the first id
// off the set and publishes on that Client's own wake channel
// ("dlock:{KEY}:wake:" and its id), so one message reaches one process, which
// wakes its longest waiting waiter. A Client that takes the lock while others of
// its waiters wait goes to the back of the set (processes take turns); one that
// loses the lock to a newcomer joins again with its old arrival; one whose
// waiters all leave takes itself off (a Lock that gives up returns once that
// is done) and passes on a wake it did not use. A release skips, and drops, the
// ids whose wake channel nobody subscribes to: a process that died while
// waiting, or whose subscription is being made again (its confirmation wakes
// it, and it joins again with its old arrival). A process that dies after it
// was woken costs the others at most the holder's TTL, as a lost message does.
// Within a process, a Lock call that finds other waiters of its Client on the
// key queues behind them without a round trip. Through a redis.Ring, which has
// no single subscription, waiters poll with the retry strategy.
//
// The fair lock (NewFair) grants in arrival order across all processes: waiters
// queue in the list "dlock:{KEY}:queue" (each entry the waiter's Client id and
// owner, alive while its key "dlock:{KEY}:queue:" and the entry lives), and a
// release hands the lock straight to the head of the queue (its lock record
// then names the head, with a new token) and wakes it alone, on its Client's
// own channel ("dlock:{KEY}:wake:" and its id); the head claims it with its
// own TTL and metadata (a head that gives up instead leaves the released record
// with at most its own TTL). A fair lock and unlock cost the server six commands,
// as a plain one's do; a contended critical section about fifteen (the
// waiter's attempt that queues it, the release that hands over and wakes it,
// its claim). See NewFair and FairWaiterTTL.
//
// # Semaphores and read-write locks
//
// NewSemaphore (N permits) and NewRWMutex (readers or one writer) hand out
// several leases of one key at once. Their holders live in the sorted set
// "dlock:{KEY}:holders" (owner -> end of its lease, server time), with each
// holder's fencing token and metadata in the lock hash, and every script drops
// the leases that ended first: a crashed holder's share comes back at its TTL.
// Each lease is an ordinary dlock.Lease, renewed and lost like a mutex's. The
// semaphore's waiters queue as the fair lock's do; see NewSemaphore and
// RWMutex.
//
// What is and is not guaranteed is documented in the dlock package overview: in
// short, a lock survives neither a restart without persistence nor an asynchronous
// failover, and fencing tokens keep increasing across both as long as the server
// clock does not step back.
package redislock

import (
	"fmt"
	"strconv"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// FenceRetention is how long a fence counter outlives the last acquisition of its
// lock, for the kinds other than the plain lock (whose counter is its lock
// record: see the package overview). Tokens stay increasing after the counter is gone because they are never
// below the server clock in microseconds; the counter only orders acquisitions
// within one microsecond or after a backward clock step shorter than this.
const FenceRetention = 24 * time.Hour

// AbandonMarkTTL is the shortest life of the mark of an abandoned acquisition;
// a mark lives the acquisition's TTL or this, whichever is longer. An attempt of
// that acquisition still in flight when it was abandoned cannot take the lock
// while the mark lives (and one that arrives later holds it at most its TTL, as
// a crashed holder does). Only an acquisition with an attempt whose reply never
// came back is marked: one whose attempts were all answered has nothing in
// flight. An attempt whose context ends while its reply is on the way reads
// that reply for up to 50 ms more, so a Lock may return a lease granted up to
// that long after its context's deadline, and a storm of callers giving up
// leaves marks only for the replies that were later still.
const AbandonMarkTTL = time.Second

// Client is the dlock.Client every constructor of this package returns (New,
// NewFair, NewReentrant, NewSemaphore, and both sides of a RWMutex); it is safe
// for concurrent use. Its connections are the go-redis client's, plus one
// subscription connection (one per Cluster master) opened from it while Lock
// calls wait, and closed some seconds after the last one. Its Inspect, List and
// ForceUnlock read and force the locks of its own kind (see Inspector for every
// kind).
type Client = dlock.Client

// conn is what the drivers of every lock kind share: the client and the
// wake-up hub.
type conn struct {
	rdb redis.UniversalClient // the go-redis client; nil over a Transport
	sc  scripter              // runs the scripts: rdb, or the Transport's wire
	w   wire                  // the subscriptions and topology
	hub *hub
	fl  flights // the acquisitions with an unanswered attempt (see abandon.go)
	// quiet is how long a call ended by its context's bare error may have
	// taken and still have nothing in flight (see notSent); 0 when no such
	// call is known to have none.
	quiet time.Duration
}

func newConn(rdb redis.UniversalClient) (*conn, error) {
	if driver.IsNil(rdb) {
		return nil, fmt.Errorf("%w: nil redis client", driver.ErrInvalid)
	}
	w := goWire{rdb}
	return &conn{rdb: rdb, sc: rdb, w: w, hub: newHub(w), quiet: quietFor(rdb)}, nil
}

var fenceRetentionMS = strconv.FormatInt(FenceRetention.Milliseconds(), 10)

// markTTL is the lifetime of an abandon mark for an acquisition with the given TTL.
func markTTL(ttl time.Duration) int64 {
	return max(ttl, AbandonMarkTTL).Milliseconds()
}

// released turns the reply of a release script into the Release result: 1 is
// done, 0 not held, and an error table a release whose wake-up failed.
func (c *conn) released(key string, res any, err error) error {
	if err != nil {
		return mapErr(err)
	}
	switch v := res.(type) {
	case int64:
		if v == 1 {
			return nil
		}
		return notHeld(key)
	case []any:
		c.hub.publishFailed(fmt.Sprint(v...))
		return nil
	}
	return fmt.Errorf("%w: redislock: unexpected release reply %v", driver.ErrRefused, res)
}
