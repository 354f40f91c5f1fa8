package redislock

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/dlock-go/dlock/driver"

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
	d, err := NewFairDriver(rdb)
	if err != nil {
		return nil, err
	}
	return dlock.NewClient(d, opts...)
}

// FairDriver is the driver.Driver of the fair (FIFO) Redis mutex. Most users want
// NewFair instead.
type FairDriver struct {
	inspection
	c *conn
}

var (
	_ driver.Notifier  = (*FairDriver)(nil)
	_ driver.Abandoner = (*FairDriver)(nil)
	_ driver.Inspector = (*FairDriver)(nil)
)

// NewFairDriver returns the fair mutex driver over rdb, configured by opts;
// dlock.NewClient makes a Client over it.
func NewFairDriver(rdb redis.UniversalClient, opts ...Option) (*FairDriver, error) {
	c, err := newConn(rdb)
	if err != nil {
		return nil, err
	}
	return newFairDriver(c, opts)
}

// newFairDriver returns the fair mutex driver over c.
func newFairDriver(c *conn, opts []Option) (*FairDriver, error) {
	if _, err := newOptions(c.rdb, "a fair lock", opts); err != nil {
		return nil, err
	}
	d := &FairDriver{c: c}
	d.inspection = inspection{c: c, k: fairKind(d.release)}
	return d, nil
}

// Acquire implements dlock.Driver. A grant's Handle is its token, which the
// release writes in the released record.
func (d *FairDriver) Acquire(ctx context.Context, r driver.AcquireRequest) (driver.Grant, error) {
	g, err := d.c.acquire(ctx, r, &acquisition{
		holder:  d,
		channel: clientWakeChannel(r.Key, d.c.hub.id),
		run: func(ctx context.Context, _ ticket) ([]any, error) {
			return redisscript.FairAcquire.Run(ctx, d.c.sc, fairKeys(r.Key, r.Owner, d.entry(r.Owner)),
				r.Owner, r.TTL.Milliseconds(), r.Metadata, waitingArg(r),
				fairWaiterTTLMS, d.c.hub.publishCmd(), wakeChannel(r.Key), d.entry(r.Owner)).Slice()
		},
		refresh: FairWaiterTTL / 5, // come back in time to refresh the queue entry
	})
	if err == nil && g.Handle == nil {
		g.Handle = g.Token
	}
	return g, err
}

// Extend implements dlock.Driver.
func (d *FairDriver) Extend(ctx context.Context, h driver.Holding, ttl time.Duration) (time.Duration, error) {
	n, err := redisscript.Extend.Run(ctx, d.c.sc, []string{LockKey(h.Key)}, h.Owner, ttl.Milliseconds(), "1").Int64()
	return extendReply(h.Key, n, err, ttl)
}

// TTL implements dlock.Driver.
func (d *FairDriver) TTL(ctx context.Context, h driver.Holding) (time.Duration, error) {
	n, err := redisscript.PTTL.Run(ctx, d.c.sc, []string{LockKey(h.Key)}, h.Owner, "1").Int64()
	return ttlReply(h.Key, n, err)
}

// Release implements dlock.Driver: the lock goes straight to the head of the
// queue, whose Client alone is woken, on its own channel. With the Handle of
// the Grant (its token), a release that nobody queued behind is one command on
// the server: the lock record stays, released, with that token, until the
// holding's TTL would have run out.
func (d *FairDriver) Release(ctx context.Context, h driver.Holding) error {
	tok := ""
	if t, ok := h.Handle.(uint64); ok && t > 0 {
		tok = strconv.FormatUint(t, 36)
	}
	return d.leave(ctx, h.Key, h.Owner, tok, "", "")
}

func (d *FairDriver) release(ctx context.Context, key, owner string) error {
	return d.leave(ctx, key, owner, "", "", "")
}

// leave gives up owner's place in key: its holding (released with token when
// given), or its queue entry when it waits. With mark set (Abandon) the
// acquisition is also marked abandoned, and the released record of a lock
// handed over to it lives at most ttl ms (when given) instead of the time it had
// to claim it.
func (d *FairDriver) leave(ctx context.Context, key, owner, token, mark, ttl string) error {
	res, err := redisscript.FairRelease.Run(ctx, d.c.sc, fairKeys(key, owner, d.entry(owner)),
		owner, token, fairWaiterTTLMS, d.c.hub.publishCmd(), wakeChannel(key), mark, d.entry(owner), ttl).Result()
	return d.c.released(key, res, err)
}

// entry is owner's entry in a fair lock's queue: this Client's hub id (16
// characters), which the hand-over wakes on its own channel, and the owner.
func (d *FairDriver) entry(owner string) string { return d.c.hub.id + owner }

// Subscribe implements driver.Notifier.
func (d *FairDriver) Subscribe(ctx context.Context, h driver.Holding) (<-chan struct{}, func(), error) {
	return d.c.hub.subscribe(ctx, h.Key, clientWakeChannel(h.Key, d.c.hub.id), h.Owner)
}

// Abandon implements driver.Abandoner: a waiter that gives up leaves the queue at
// once and passes the lock on if it had just been handed to it; its acquisition
// is marked abandoned (see AbandonMarkTTL), so that an attempt still in flight
// cannot queue it again or take the lock. A lock handed over to it that it never
// claimed is released as the acquisition's own holding would be: its record
// lives no longer than the acquisition's TTL.
func (d *FairDriver) Abandon(ctx context.Context, h driver.Holding) error {
	ttl := ""
	if h.TTL > 0 {
		ttl = strconv.FormatInt(h.TTL.Milliseconds(), 10)
	}
	err := d.leave(ctx, h.Key, h.Owner, "", d.c.fl.mark(h), ttl)
	if errors.Is(err, driver.ErrNotHeld) {
		return nil
	}
	return err
}
