// Package redislock is dlock's Redis backend: exclusive leases with fencing tokens
// on a single Redis server, a Sentinel-managed master or a Redis Cluster, through
// the caller's go-redis v9 client.
//
// Each lock is a hash "dlock:{KEY}" (fields o = owner, t = fencing token, m =
// metadata, w = present when somebody may wait, so that the release wakes them) with
// an expiry, and a companion fence counter "dlock:{KEY}:fence". The hash tag keeps
// every key of a lock in one Cluster slot, so every script is single-slot.
// Acquire, extend and release are one Lua script each (one round trip),
// owner-checked, and no code path creates a lock key without an expiry. The
// acquire script uses SET … GET: Redis 6.2 or later.
//
// # Waiting
//
// Lock does not poll. A waiter's failed attempt marks the holding (field w) and
// returns the holder's remaining TTL; the release of a marked holding publishes on
// the lock's wake channel (WakeChannel), and the waiter sleeps until a message or
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
// The plain lock (New) is not fair but does not starve waiters: a message wakes
// one waiter per Client, the longest waiting, and a Lock call that finds other
// waiters of its Client on the key queues behind them without a round trip, so
// the goroutines of one process take turns. Clients in different processes race
// on each release. Through a redis.Ring, which has no single subscription,
// waiters poll with the retry strategy.
//
// The fair lock (NewFair) grants in arrival order across all processes: waiters
// queue in the list "dlock:{KEY}:queue" with deadlines in the sorted set
// "dlock:{KEY}:queue:deadline", and a release hands the lock straight to the head
// of the queue and wakes it alone. See NewFair and FairWaiterTTL.
//
// What is and is not guaranteed is documented in the dlock package overview: in
// short, a lock survives neither a restart without persistence nor an asynchronous
// failover, and fencing tokens keep increasing across both as long as the server
// clock does not step back.
package redislock

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redisscript"
	"github.com/redis/go-redis/v9"
)

// Prefix starts every key dlock writes to Redis.
const Prefix = "dlock:"

// FenceRetention is how long a fence counter outlives the last acquisition of its
// lock. Tokens stay increasing after the counter is gone because they are never
// below the server clock in microseconds; the counter only orders acquisitions
// within one microsecond or after a backward clock step shorter than this.
const FenceRetention = 24 * time.Hour

// Client is a dlock.Locker on Redis. Create it with New or NewFair; it is safe
// for concurrent use. Its connections are the go-redis client's, plus one
// subscription connection (one per Cluster master) opened from it while Lock
// calls wait, and closed some seconds after the last one.
type Client struct {
	*dlock.Client
	d *Driver
}

// New returns a Client that locks through rdb, which may be a *redis.Client,
// *redis.ClusterClient, a Sentinel failover client, or any redis.UniversalClient.
// opts become the defaults of every TryLock and Lock. It returns an error matching
// dlock.ErrInvalid for a nil client or a bad option; it does no I/O.
func New(rdb redis.UniversalClient, opts ...dlock.Option) (*Client, error) {
	d, err := NewDriver(rdb)
	if err != nil {
		return nil, err
	}
	c, err := dlock.NewClient(d, opts...)
	if err != nil {
		return nil, err
	}
	return &Client{Client: c, d: d}, nil
}

// Driver is the dlock.Driver of a Client: single owner-checked attempts, one Lua
// script round trip each. Most users want New instead.
type Driver struct {
	rdb  redis.UniversalClient
	hub  *hub
	fair bool
}

// NewDriver returns the Redis driver over rdb.
func NewDriver(rdb redis.UniversalClient) (*Driver, error) {
	if dlock.IsNil(rdb) {
		return nil, fmt.Errorf("%w: nil redis client", dlock.ErrInvalid)
	}
	return &Driver{rdb: rdb, hub: newHub(rdb)}, nil
}

// LockKey returns the Redis key of the lock named key.
func LockKey(key string) string { return Prefix + "{" + key + "}" }

// FenceKey returns the Redis key of the fence counter of the lock named key.
func FenceKey(key string) string { return Prefix + "{" + key + "}:fence" }

var fenceRetentionMS = strconv.FormatInt(FenceRetention.Milliseconds(), 10)

// Acquire implements dlock.Driver.
func (d *Driver) Acquire(ctx context.Context, r dlock.AcquireRequest) (uint64, error) {
	if d.fair {
		return d.acquireFair(ctx, r)
	}
	markBusy, markTaken := "0", "0"
	done := func(error) {}
	if r.Waiting {
		mark, queued, fin := d.hub.attempt(WakeChannel(r.Key), r.Owner, true)
		if queued > 0 {
			// Other waiters of this process came first: wait for a wake in turn.
			return 0, &dlock.BusyError{Remaining: queued}
		}
		markBusy, done = "1", fin
		if mark {
			markTaken = "1"
		}
	}
	res, err := redisscript.Acquire.Run(ctx, d.rdb,
		[]string{LockKey(r.Key), FenceKey(r.Key)},
		r.Owner, r.TTL.Milliseconds(), fenceRetentionMS, r.Metadata, markBusy, markTaken).Slice()
	token, err := acquireReply(res, err)
	done(err)
	return token, err
}

// acquireReply decodes the {1, token} or {0, pttl} reply of an acquire script.
func acquireReply(res []any, err error) (uint64, error) {
	if err != nil {
		return 0, mapErr(err)
	}
	if len(res) != 2 {
		return 0, fmt.Errorf("redislock: unexpected acquire reply %v", res)
	}
	ok, _ := res[0].(int64)
	v, _ := res[1].(int64)
	if ok != 1 {
		rem := time.Duration(v) * time.Millisecond
		if v < 0 {
			rem = -1
		}
		return 0, &dlock.BusyError{Remaining: rem}
	}
	if v <= 0 {
		return 0, fmt.Errorf("redislock: invalid fencing token %d", v)
	}
	return uint64(v), nil
}

// Extend implements dlock.Driver.
func (d *Driver) Extend(ctx context.Context, key, owner string, ttl time.Duration) error {
	n, err := redisscript.Extend.Run(ctx, d.rdb, []string{LockKey(key)}, owner, ttl.Milliseconds()).Int64()
	if err != nil {
		return mapErr(err)
	}
	if n != 1 {
		return notHeld(key)
	}
	return nil
}

// Release implements dlock.Driver.
func (d *Driver) Release(ctx context.Context, key, owner string) error {
	var n int64
	var err error
	if d.fair {
		n, err = d.runFairRelease(ctx, key, owner)
	} else {
		n, err = redisscript.Release.Run(ctx, d.rdb, []string{LockKey(key)}, owner, d.hub.publishCmd(), WakeChannel(key)).Int64()
		err = mapErr(err)
	}
	if err != nil {
		return err
	}
	if n != 1 {
		return notHeld(key)
	}
	return nil
}

// TTL implements dlock.Driver.
func (d *Driver) TTL(ctx context.Context, key, owner string) (time.Duration, error) {
	n, err := redisscript.PTTL.Run(ctx, d.rdb, []string{LockKey(key)}, owner).Int64()
	if err != nil {
		return 0, mapErr(err)
	}
	if n == -2 {
		return 0, notHeld(key)
	}
	if n < 0 {
		return 0, fmt.Errorf("redislock: lock %q has no expiry (PTTL %d)", key, n)
	}
	return time.Duration(n) * time.Millisecond, nil
}

func notHeld(key string) error {
	return fmt.Errorf("%w: %q is not held by this owner", dlock.ErrNotHeld, key)
}

// mapErr turns a go-redis error into one matching the dlock sentinels.
func mapErr(err error) error { return redisscript.MapErr("redislock", err) }
