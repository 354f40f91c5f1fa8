package redislock

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redisscript"
	"github.com/redis/go-redis/v9"
)

// FairWaiterTTL is how long the queue entry of a fair-lock waiter lives without
// being refreshed: a waiter that died or was cut off is dropped from the queue
// at most this long after its last attempt. A waiting Lock refreshes its entry
// at least every FairWaiterTTL/5. It is also the time the head of the queue has
// to claim a lock handed over to it before the lock moves on.
const FairWaiterTTL = 5 * time.Second

var fairWaiterTTLMS = strconv.FormatInt(FairWaiterTTL.Milliseconds(), 10)

// QueueKey returns the Redis key of the fair-lock queue of the lock named key: a
// list of waiting owners in arrival order.
func QueueKey(key string) string { return Prefix + "{" + key + "}:queue" }

// QueueDeadlineKey returns the Redis key of the deadlines of the fair-lock queue of
// the lock named key: a sorted set of owners scored by the server time in
// milliseconds after which their entry is dropped.
func QueueDeadlineKey(key string) string { return Prefix + "{" + key + "}:queue:deadline" }

// NewFair returns a Client whose locks are granted first come, first served:
// Lock joins a queue kept in Redis, and a release hands the lock directly to the
// head of the queue, so newcomers cannot barge ahead of earlier waiters, in this
// process or any other. TryLock obtains the lock only when it is free and nobody
// queues. Leases are the same as New's: fencing tokens, watchdog and loss
// notification. A waiter whose Lock gives up (context, WithWait) leaves the queue
// at once; one that dies is dropped after FairWaiterTTL.
//
// A waiting Lock makes an attempt, which keeps its place, at least every
// FairWaiterTTL/5 besides those it is woken for; a WithRetry(LimitAttempts(...))
// counts them.
//
// A key must be locked either through fair Clients or through plain ones: a
// plain Client ignores the queue. rdb and opts are as for New.
func NewFair(rdb redis.UniversalClient, opts ...dlock.Option) (*Client, error) {
	d, err := NewDriver(rdb)
	if err != nil {
		return nil, err
	}
	d.fair = true
	c, err := dlock.NewClient(d, opts...)
	if err != nil {
		return nil, err
	}
	return &Client{Client: c, d: d}, nil
}

func fairKeys(key string) []string {
	return []string{LockKey(key), FenceKey(key), QueueKey(key), QueueDeadlineKey(key)}
}

func (d *Driver) acquireFair(ctx context.Context, r dlock.AcquireRequest) (uint64, error) {
	waiting := "0"
	done := func(error) {}
	if r.Waiting {
		_, _, done = d.hub.attempt(WakeChannel(r.Key), r.Owner, false)
		waiting = "1"
	}
	res, err := redisscript.FairAcquire.Run(ctx, d.rdb, fairKeys(r.Key),
		r.Owner, r.TTL.Milliseconds(), fenceRetentionMS, r.Metadata, waiting,
		fairWaiterTTLMS, d.hub.publishCmd(), WakeChannel(r.Key)).Slice()
	token, err := acquireReply(res, err)
	done(err)
	var busy *dlock.BusyError
	if errors.As(err, &busy) && r.Waiting {
		// Come back in time to refresh the queue entry.
		if refresh := FairWaiterTTL / 5; busy.Remaining < 0 || busy.Remaining > refresh {
			busy.Remaining = refresh
		}
	}
	return token, err
}

func (d *Driver) runFairRelease(ctx context.Context, key, owner string) (int64, error) {
	n, err := redisscript.FairRelease.Run(ctx, d.rdb, fairKeys(key),
		owner, fenceRetentionMS, fairWaiterTTLMS, d.hub.publishCmd(), WakeChannel(key)).Int64()
	return n, mapErr(err)
}

// Abandon implements dlock.Abandoner: a fair-lock waiter that gives up leaves the
// queue at once, and passes the lock on if it had just been handed to it. For a
// plain lock it does nothing: a waiter leaves no state behind but a mark that
// goes with the current holding.
func (d *Driver) Abandon(ctx context.Context, key, owner string) error {
	if !d.fair {
		return nil
	}
	_, err := d.runFairRelease(ctx, key, owner)
	return err
}
