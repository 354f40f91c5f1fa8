package redislock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redisscript"
	"github.com/redis/go-redis/v9"
)

// Driver is the driver.Driver of the plain (not fair) Redis mutex: single
// owner-checked attempts, one Lua script round trip each. It is also a
// driver.Inspector of the plain mutexes. Most users want New instead.
type Driver struct {
	inspection
	c          *conn
	ack        int           // replicas that must acknowledge an acquisition (WithReplicaAck)
	ackTimeout time.Duration // how long to wait for them
}

var (
	_ driver.Notifier    = (*Driver)(nil)
	_ driver.Abandoner   = (*Driver)(nil)
	_ driver.Inspector   = (*Driver)(nil)
	_ driver.LockDelayer = (*Driver)(nil)
)

// MaxLockDelay implements driver.LockDelayer: the lock record keeps the
// holding's lock-delay, and its key lives that much past the holding (see
// docs/safety.md).
func (d *Driver) MaxLockDelay() time.Duration { return driver.MaxLockDelay }

// NewDriver returns the plain mutex driver over rdb, configured by opts.
// NewClient makes a Client over it. It returns an error matching
// dlock.ErrInvalid for a nil client or a bad option; it does no I/O.
func NewDriver(rdb redis.UniversalClient, opts ...Option) (*Driver, error) {
	c, err := newConn(rdb)
	if err != nil {
		return nil, err
	}
	return newDriver(c, opts)
}

// newDriver returns the plain mutex driver over c.
func newDriver(c *conn, opts []Option) (*Driver, error) {
	o, err := newOptions(c.rdb, "", opts)
	if err != nil {
		return nil, err
	}
	d := &Driver{c: c, ack: o.ack, ackTimeout: o.ackTimeout}
	d.inspection = inspection{c: c, k: mutexKind(c.releaseForced)}
	return d, nil
}

// Acquire implements driver.Driver. A grant's Handle names its token, which
// Release records in the released lock record (see Release).
func (d *Driver) Acquire(ctx context.Context, r driver.AcquireRequest) (driver.Grant, error) {
	if strings.IndexByte(r.Owner, ' ') >= 0 {
		return driver.Grant{}, fmt.Errorf("%w: redislock: owner %q contains a space", driver.ErrInvalid, r.Owner)
	}
	return d.c.acquire(ctx, r, d)
}

// ticket implements attempter. Only a process with waiters of its own on a
// lock has anything to tell: others make no channel name.
func (d *Driver) ticket(ctx context.Context, h *hub, r driver.AcquireRequest) ticket {
	if !h.waiting() {
		return ticket{}
	}
	return h.attempt(ctx, clientWakeChannel(r.Key, h.id), r.Owner, true)
}

// call implements attempter: the acquire script, with its arguments in a
// pooled call.
func (d *Driver) call(ctx context.Context, r driver.AcquireRequest, t ticket) reply {
	lock, waiting, fence, abandon := plainKeys(r.Key, r.Owner)
	var retake, markBusy, markTaken, hubID, registered any = "0", "0", "0", "", "0"
	if _, ok := r.Handle.(redisscript.Retake); ok {
		retake = "1"
	}
	if r.Waiting {
		markBusy = "1"
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
	c := getCall()
	defer c.put()
	if t.subscribed {
		// Only a process that is subscribed joins the waiting set: its
		// confirmation makes every waiter try again, and join then.
		hubID = c.str(4, d.c.hub.id)
	}
	argv := append(c.argv[:redisscript.LeanArgs], "4",
		c.str(0, lock), c.str(1, fence), c.str(2, abandon), c.str(3, waiting),
		c.str(5, r.Owner), c.int(0, r.TTL.Milliseconds()), retake, c.str(6, r.Metadata),
		markBusy, markTaken, hubID, c.str(7, t.arrival), registered, c.int(1, r.Delay.Milliseconds()))
	res, acked, err := d.runAcquire(ctx, argv)
	return reply{res: res, acked: acked, keys: waiting, err: err}
}

// grant implements attempter: the grant's Handle names its token and the
// key's waiting set, once the replicas acknowledged it when asked to.
func (d *Driver) grant(ctx context.Context, r driver.AcquireRequest, rep reply) (driver.Grant, string, error) {
	g, arrival, err := plainGrant(rep.res, rep.err, r.TTL)
	if err == nil {
		err = d.checkAck(ctx, r, rep.acked)
	}
	if err != nil {
		return g, arrival, err // the hub learns the token of a grant the replicas did not acknowledge
	}
	g.Handle = &plainHolding{token: g.Token, waiting: rep.keys}
	return g, arrival, nil
}

// refreshEvery implements attempter: a plain waiter's entry in the waiting
// set needs no refresh.
func (d *Driver) refreshEvery() time.Duration { return 0 }

// lossHolder implements attempter.
func (d *Driver) lossHolder() driver.Driver { return d }

// plainGrant decodes the reply of the acquire script: a grant, the arrival it
// carries, or the attempt's error.
func plainGrant(res any, err error, ttl time.Duration) (driver.Grant, string, error) {
	if v, ok := res.(int64); ok && err == nil {
		// A grant that carries no arrival is its token alone.
		if v <= 0 {
			return driver.Grant{}, "", fmt.Errorf("%w: redislock: invalid fencing token %d", driver.ErrRefused, v)
		}
		return driver.Grant{Token: uint64(v), TTL: ttl}, "", nil
	}
	s, _ := res.([]any)
	arrival := ""
	if err == nil && len(s) == 3 {
		arrival, _ = s[2].(string)
		s = s[:2]
	}
	if err == nil && s == nil {
		return driver.Grant{}, "", fmt.Errorf("%w: redislock: unexpected acquire reply %v", driver.ErrRefused, res)
	}
	g, err := acquireReply(s, err, ttl)
	return g, arrival, err
}

// runAcquire runs the acquire script with the command line argv; with
// WithReplicaAck it is followed, on the same connection, by WAIT, whose count
// it returns.
func (d *Driver) runAcquire(ctx context.Context, argv []any) (any, int64, error) {
	if d.ack == 0 {
		res, err := redisscript.Acquire.Run(ctx, d.c.sc, argv).Result()
		return res, 0, err
	}
	for _, eval := range []bool{false, true} {
		pipe := d.c.rdb.Pipeline()
		cmd := redisscript.Acquire.Queue(ctx, pipe, argv, eval)
		wait := pipe.Do(ctx, "WAIT", d.ack, d.ackTimeout.Milliseconds())
		_, _ = pipe.Exec(ctx) // errors are read per command
		if !eval && redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			continue
		}
		res, err := cmd.Result()
		acked, _ := wait.Int64()
		return res, acked, err
	}
	return nil, 0, fmt.Errorf("%w: redislock: the acquire script could not be loaded", driver.ErrRefused)
}

// Extend implements driver.Driver.
func (d *Driver) Extend(ctx context.Context, h driver.Holding, ttl time.Duration) (time.Duration, error) {
	n, err := redisscript.Extend.Run(ctx, d.c.sc, []string{LockKey(h.Key)}, h.Owner, ttl.Milliseconds(), "1").Int64()
	return extendReply(h.Key, n, err, ttl)
}

// Release implements driver.Driver. When h.Handle is the Handle of the Grant
// that Acquire returned, or a token (a uint64), the release is one command on
// the server: the lock record stays, released, with that token, until the
// holding's TTL would have run out, so that the next acquisition draws a token
// above it and above the server clock. A caller that handed out a token of its
// own for the holding (Redlock, the largest of several servers') records it
// so. With another Handle (an acquisition that failed and is cleaned up) the
// record goes, only the holding with the token of a redisscript.Drawn Handle
// when it is one, and the next token is drawn from the server clock.
func (d *Driver) Release(ctx context.Context, h driver.Holding) error {
	switch hd := h.Handle.(type) {
	case *plainHolding:
		if lock, waiting, ok := hd.releaseKeys(h.Key); ok {
			return d.c.release(ctx, h.Key, lock, waiting, h.Owner, hd.token, false)
		}
		return d.c.release(ctx, h.Key, LockKey(h.Key), waitingKey(h.Key), h.Owner, hd.token, false)
	case uint64:
		return d.c.release(ctx, h.Key, LockKey(h.Key), waitingKey(h.Key), h.Owner, hd, false)
	}
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

// releaseForced releases the holding of owner read by an inspection; the
// released record keeps the lock's token, and a holding with a lock-delay
// leaves the lock in its delay.
func (c *conn) releaseForced(ctx context.Context, key, owner string) error {
	return c.release(ctx, key, LockKey(key), waitingKey(key), owner, 0, true)
}

// release releases owner's holding of the plain lock named key, whose lock
// key and waiting set are lock and waiting, recording token (0: the record's
// own) in the released record; forced says that the holding is forced
// (ForceUnlock), which starts its lock-delay.
func (c *conn) release(ctx context.Context, key, lock, waiting, owner string, token uint64, forced bool) error {
	tok := ""
	if token > 0 {
		tok = strconv.FormatUint(token, 36)
	}
	call := getCall()
	argv := append(call.argv[:redisscript.LeanArgs], "2", call.str(0, lock), call.str(1, waiting),
		call.str(2, owner), c.hub.publishArg(), call.str(3, tok), forcedArg(forced))
	res, err := redisscript.Release.Run(ctx, c.sc, argv).Result()
	call.put()
	err = c.released(key, res, err)
	if err == nil && c.hub.waiting() {
		c.hub.released(clientWakeChannel(key, c.hub.id))
	}
	return err
}

// TTL implements driver.Driver.
func (d *Driver) TTL(ctx context.Context, h driver.Holding) (time.Duration, error) {
	n, err := redisscript.PTTL.Run(ctx, d.c.sc, []string{LockKey(h.Key)}, h.Owner, "1").Int64()
	return ttlReply(h.Key, n, err)
}

// Subscribe implements driver.Notifier.
func (d *Driver) Subscribe(ctx context.Context, h driver.Holding) (<-chan struct{}, func(), error) {
	return d.c.hub.subscribe(ctx, h.Key, clientWakeChannel(h.Key, d.c.hub.id), h.Owner)
}

// Abandon implements driver.Abandoner: it releases the owner's holding if an
// attempt landed, and marks the acquisition abandoned (see AbandonMarkTTL) so
// that an attempt still in flight on another connection cannot take the lock
// after it.
func (d *Driver) Abandon(ctx context.Context, h driver.Holding) error {
	_, err := d.drop(ctx, h, d.c.fl.mark(h), "")
	return err
}

// drop removes h's lock record if h holds it (with token drawn, in decimal,
// unless drawn is ""), waking a waiting process as a release does, and marks
// the acquisition abandoned for mark ms ("0": no mark). It returns 1 when it
// removed a holding, 0 otherwise.
func (d *Driver) drop(ctx context.Context, h driver.Holding, mark, drawn string) (int64, error) {
	n, err := redisscript.Abandon.Run(ctx, d.c.sc, []string{LockKey(h.Key), abandonKey(h.Key, h.Owner), waitingKey(h.Key)},
		h.Owner, d.c.hub.publishCmd(), wakeChannel(h.Key), mark, drawn).Int64()
	if err == nil && n == 1 {
		d.c.hub.released(clientWakeChannel(h.Key, d.c.hub.id))
	}
	return n, mapErr(err)
}

// forcedArg is the release script's argument that says whether a release is
// forced, ready for a command line (a constant, which boxing does not copy).
func forcedArg(forced bool) any {
	if forced {
		return "1"
	}
	return "0"
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
	return dlock.NewClient(d, opts...)
}

// NewClient returns a Client over d (a Driver made with options), with opts as
// the defaults of every TryLock and Lock.
func NewClient(d *Driver, opts ...dlock.Option) (*Client, error) {
	if d == nil {
		return nil, fmt.Errorf("%w: nil driver", driver.ErrInvalid)
	}
	return dlock.NewClient(d, opts...)
}
