package redislock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redisscript"
	"github.com/redis/go-redis/v9"
)

// Driver is the dlock.Driver of the plain (not fair) Redis mutex: single
// owner-checked attempts, one Lua script round trip each. It is also a
// dlock.Inspector of the plain mutexes. Most users want New instead.
type Driver struct {
	inspection
	c          *conn
	ack        int           // replicas that must acknowledge an acquisition (WithReplicaAck)
	ackTimeout time.Duration // how long to wait for them
}

var (
	_ dlock.Notifier  = (*Driver)(nil)
	_ dlock.Abandoner = (*Driver)(nil)
	_ dlock.Inspector = (*Driver)(nil)
)

// NewDriver returns the plain mutex driver over rdb. NewClient makes a Client
// over it.
func NewDriver(rdb redis.UniversalClient, opts ...DriverOption) (*Driver, error) {
	c, err := newConn(rdb)
	if err != nil {
		return nil, err
	}
	d := &Driver{c: c}
	d.inspection = inspection{c: c, k: mutexKind(d.release)}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: redislock: nil driver option", dlock.ErrInvalid)
		}
		if err := o(d); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// Acquire implements dlock.Driver.
func (d *Driver) Acquire(ctx context.Context, r dlock.AcquireRequest) (dlock.Grant, error) {
	var acked int64
	return d.c.acquire(ctx, r, acquisition{
		channel: clientWakeChannel(r.Key, d.c.hub.id),
		queues:  true,
		extra:   true,
		run: func(ctx context.Context, t ticket) ([]any, error) {
			markBusy, markTaken, hubID, registered := "0", "0", "", "0"
			if r.Waiting {
				markBusy = "1"
			}
			if t.subscribed {
				// Only a process that is subscribed joins the waiting set: its
				// confirmation makes every waiter try again, and join then.
				hubID = d.c.hub.id
			}
			if t.othersWait {
				markTaken = "1"
			}
			if t.arrival != "" {
				registered = "1"
			}
			res, n, err := d.runAcquire(ctx,
				[]string{LockKey(r.Key), FenceKey(r.Key), abandonKey(r.Key, r.Owner), waitingKey(r.Key)},
				r.Owner, r.TTL.Milliseconds(), fenceRetentionMS, r.Metadata, markBusy, markTaken,
				hubID, t.arrival, registered)
			acked = n
			return res, err
		},
		granted: func(ctx context.Context) error { return d.checkAck(ctx, r, acked) },
	})
}

// runAcquire runs the acquire script; with WithReplicaAck it is followed, on the
// same connection, by WAIT, whose count it returns.
func (d *Driver) runAcquire(ctx context.Context, keys []string, args ...any) ([]any, int64, error) {
	if d.ack == 0 {
		res, err := redisscript.Acquire.Run(ctx, d.c.rdb, keys, args...).Slice()
		return res, 0, err
	}
	for _, eval := range []bool{false, true} {
		pipe := d.c.rdb.Pipeline()
		var cmd *redis.Cmd
		if eval {
			cmd = redisscript.Acquire.Eval(ctx, pipe, keys, args...)
		} else {
			cmd = redisscript.Acquire.EvalSha(ctx, pipe, keys, args...)
		}
		wait := pipe.Do(ctx, "WAIT", d.ack, d.ackTimeout.Milliseconds())
		_, _ = pipe.Exec(ctx) // errors are read per command
		if !eval && redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			continue
		}
		res, err := cmd.Slice()
		acked, _ := wait.Int64()
		return res, acked, err
	}
	return nil, 0, fmt.Errorf("%w: redislock: the acquire script could not be loaded", dlock.ErrRefused)
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
	res, err := redisscript.Release.Run(ctx, d.c.rdb, []string{LockKey(key), waitingKey(key)}, owner, d.c.hub.publishCmd(), wakeChannel(key)).Result()
	err = d.c.released(key, res, err)
	if err == nil {
		d.c.hub.released(clientWakeChannel(key, d.c.hub.id))
	}
	return err
}

// TTL implements dlock.Driver.
func (d *Driver) TTL(ctx context.Context, h dlock.Holding) (time.Duration, error) {
	return d.c.ttl(ctx, h)
}

// Subscribe implements dlock.Notifier.
func (d *Driver) Subscribe(ctx context.Context, h dlock.Holding) (<-chan struct{}, func(), error) {
	return d.c.hub.subscribe(ctx, h.Key, clientWakeChannel(h.Key, d.c.hub.id), h.Owner)
}

// Abandon implements dlock.Abandoner: it releases the owner's holding if an
// attempt landed, and marks the acquisition abandoned (see AbandonMarkTTL) so
// that an attempt still in flight on another connection cannot take the lock
// after it.
func (d *Driver) Abandon(ctx context.Context, h dlock.Holding) error {
	n, err := redisscript.Abandon.Run(ctx, d.c.rdb, []string{LockKey(h.Key), abandonKey(h.Key, h.Owner), waitingKey(h.Key)},
		h.Owner, d.c.hub.publishCmd(), wakeChannel(h.Key), d.c.fl.mark(h)).Int64()
	if err == nil && n == 1 {
		d.c.hub.released(clientWakeChannel(h.Key, d.c.hub.id))
	}
	return mapErr(err)
}
