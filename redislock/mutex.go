package redislock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
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
	d.inspection = inspection{c: c, k: mutexKind(d.releaseForced)}
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

// Acquire implements dlock.Driver. A grant's Handle is its fencing token (a
// uint64), which Release records in the released lock record (see Release).
func (d *Driver) Acquire(ctx context.Context, r dlock.AcquireRequest) (dlock.Grant, error) {
	if strings.ContainsAny(r.Owner, " ") {
		return dlock.Grant{}, fmt.Errorf("%w: redislock: owner %q contains a space", dlock.ErrInvalid, r.Owner)
	}
	var acked int64
	retake := ""
	if _, ok := r.Handle.(redisscript.Retake); ok {
		retake = "1"
	}
	g, err := d.c.acquire(ctx, r, acquisition{
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
			switch {
			case t.onSet:
				registered = "1"
			case t.arrival != "":
				registered = "2" // woken: a release took it off the set
			}
			res, n, err := d.runAcquire(ctx,
				[]string{LockKey(r.Key), FenceKey(r.Key), abandonKey(r.Key, r.Owner), waitingKey(r.Key)},
				r.Owner, r.TTL.Milliseconds(), retake, r.Metadata, markBusy, markTaken,
				hubID, t.arrival, registered)
			acked = n
			return res, err
		},
		granted: func(ctx context.Context) error { return d.checkAck(ctx, r, acked) },
	})
	if err == nil {
		g.Handle = g.Token
	}
	return g, err
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
	n, err := redisscript.Extend.Run(ctx, d.c.rdb, []string{LockKey(h.Key)}, h.Owner, ttl.Milliseconds(), "1").Int64()
	return extendReply(h.Key, n, err, ttl)
}

// Release implements dlock.Driver. When h.Handle is a uint64, the holding's
// token (the Handle of the Grant that Acquire returned), the release is one
// command on the server: the lock record stays, released, with that token,
// until the holding's TTL would have run out, so that the next acquisition
// draws a token above it and above the server clock. A caller that handed out a
// token of its own for the holding (Redlock, the largest of several servers')
// records it so. With another Handle (an acquisition that failed and is
// cleaned up) the record goes, only the holding with the token of a
// redisscript.Drawn Handle when it is one, and the next token is drawn from
// the server clock.
func (d *Driver) Release(ctx context.Context, h dlock.Holding) error {
	tok, ok := h.Handle.(uint64)
	if !ok {
		drawn := ""
		if dr, ok := h.Handle.(redisscript.Drawn); ok {
			drawn = strconv.FormatUint(dr.Token, 10)
		}
		n, err := d.drop(ctx, h, "0", drawn)
		if err == nil && n != 1 {
			err = notHeld(h.Key)
		}
		return err
	}
	return d.release(ctx, h.Key, h.Owner, tok)
}

// releaseForced releases the holding of owner read by an inspection; the
// released record keeps the lock's token.
func (d *Driver) releaseForced(ctx context.Context, key, owner string) error {
	return d.release(ctx, key, owner, 0)
}

func (d *Driver) release(ctx context.Context, key, owner string, token uint64) error {
	tok := ""
	if token > 0 {
		tok = strconv.FormatUint(token, 36)
	}
	res, err := redisscript.Release.Run(ctx, d.c.rdb, []string{LockKey(key), waitingKey(key)}, owner, d.c.hub.publishCmd(), wakeChannel(key), tok).Result()
	err = d.c.released(key, res, err)
	if err == nil && d.c.hub.waiting() {
		d.c.hub.released(clientWakeChannel(key, d.c.hub.id))
	}
	return err
}

// TTL implements dlock.Driver.
func (d *Driver) TTL(ctx context.Context, h dlock.Holding) (time.Duration, error) {
	n, err := redisscript.PTTL.Run(ctx, d.c.rdb, []string{LockKey(h.Key)}, h.Owner, "1").Int64()
	return ttlReply(h.Key, n, err)
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
	_, err := d.drop(ctx, h, d.c.fl.mark(h), "")
	return err
}

// drop removes h's lock record if h holds it (with token drawn, in decimal,
// unless drawn is ""), waking a waiting process as a release does, and marks
// the acquisition abandoned for mark ms ("0": no mark). It returns 1 when it
// removed a holding, 0 otherwise.
func (d *Driver) drop(ctx context.Context, h dlock.Holding, mark, drawn string) (int64, error) {
	n, err := redisscript.Abandon.Run(ctx, d.c.rdb, []string{LockKey(h.Key), abandonKey(h.Key, h.Owner), waitingKey(h.Key)},
		h.Owner, d.c.hub.publishCmd(), wakeChannel(h.Key), mark, drawn).Int64()
	if err == nil && n == 1 {
		d.c.hub.released(clientWakeChannel(h.Key, d.c.hub.id))
	}
	return n, mapErr(err)
}
