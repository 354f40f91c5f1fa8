package redislock

import (
	"context"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redisscript"
	"github.com/redis/go-redis/v9"
)

// Driver is the dlock.Driver of the plain (not fair) Redis mutex: single
// owner-checked attempts, one Lua script round trip each. Most users want New
// instead.
type Driver struct {
	c *conn
}

var (
	_ dlock.Notifier  = (*Driver)(nil)
	_ dlock.Abandoner = (*Driver)(nil)
)

// NewDriver returns the plain mutex driver over rdb.
func NewDriver(rdb redis.UniversalClient) (*Driver, error) {
	c, err := newConn(rdb)
	if err != nil {
		return nil, err
	}
	return &Driver{c: c}, nil
}

// Acquire implements dlock.Driver.
func (d *Driver) Acquire(ctx context.Context, r dlock.AcquireRequest) (dlock.Grant, error) {
	markBusy, markTaken, hubID, score, registered := "0", "0", "", "", "0"
	done := func(error, string, uint64) {}
	if r.Waiting {
		sub, mark, sc, queued, fin := d.c.hub.attempt(r.Key, r.Owner, true)
		if queued > 0 {
			// Other waiters of this process came first: wait for a wake in turn.
			return dlock.Grant{}, &dlock.BusyError{Remaining: queued}
		}
		markBusy, done, score = "1", fin, sc
		if sub {
			// Only a process that is subscribed joins the waiting set: its
			// confirmation makes every waiter try again, and join then.
			hubID = d.c.hub.id
		}
		if mark {
			markTaken = "1"
		}
		if sc != "" {
			registered = "1"
		}
	}
	res, err := redisscript.Acquire.Run(ctx, d.c.rdb,
		[]string{LockKey(r.Key), FenceKey(r.Key), AbandonKey(r.Key, r.Owner), WaitingKey(r.Key)},
		r.Owner, r.TTL.Milliseconds(), fenceRetentionMS, r.Metadata, markBusy, markTaken,
		hubID, score, registered).Slice()
	arrival := ""
	if len(res) == 3 {
		arrival, _ = res[2].(string)
		res = res[:2]
	}
	g, err := acquireReply(res, err, r.TTL)
	done(err, arrival, g.Token)
	return g, err
}

// Extend implements dlock.Driver.
func (d *Driver) Extend(ctx context.Context, h dlock.Holding, ttl time.Duration) (time.Duration, error) {
	return d.c.extend(ctx, h, ttl)
}

// Release implements dlock.Driver.
func (d *Driver) Release(ctx context.Context, h dlock.Holding) error {
	return d.release(ctx, h.Key, h.Owner)
}

func (d *Driver) release(ctx context.Context, key, owner string) error {
	res, err := redisscript.Release.Run(ctx, d.c.rdb, []string{LockKey(key), WaitingKey(key)}, owner, d.c.hub.publishCmd(), WakeChannel(key)).Result()
	return d.c.released(key, res, err)
}

// TTL implements dlock.Driver.
func (d *Driver) TTL(ctx context.Context, h dlock.Holding) (time.Duration, error) {
	return d.c.ttl(ctx, h)
}

// Subscribe implements dlock.Notifier.
func (d *Driver) Subscribe(ctx context.Context, h dlock.Holding) (<-chan struct{}, func(), error) {
	return d.c.hub.subscribe(ctx, h.Key, h.Owner)
}

// Abandon implements dlock.Abandoner: it releases the owner's holding if an
// attempt landed, and marks the acquisition abandoned (see AbandonMarkTTL) so
// that an attempt still in flight on another connection cannot take the lock
// after it.
func (d *Driver) Abandon(ctx context.Context, h dlock.Holding) error {
	_, err := redisscript.Abandon.Run(ctx, d.c.rdb, []string{LockKey(h.Key), AbandonKey(h.Key, h.Owner), WaitingKey(h.Key)},
		h.Owner, d.c.hub.publishCmd(), WakeChannel(h.Key), markTTL(h.TTL)).Result()
	return mapErr(err)
}
