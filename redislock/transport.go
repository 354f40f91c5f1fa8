package redislock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/redis/go-redis/v9"
)

// Transport is a Redis client other than go-redis's, for the locks of this
// package: the plain lock and the fair lock run the
// same scripts, draw the same tokens, wait, renew and are told of losses
// exactly as over a go-redis client, through the same code, which sends its
// commands through a Transport instead. NewOver and NewDriverOver make the
// plain lock over a Transport, NewFairDriverOver the fair lock's driver. The module
// github.com/dlock-go/dlock/dlockrueidis implements it over rueidis and
// valkey-go clients.
//
// What a Transport does not give: replica acknowledgements (WithReplicaAck,
// refused with ErrTransportUnsupported), and the listing of locks on a Redis
// Cluster (List on a Driver over a Transport scans a single server, and fails
// with ErrTransportUnsupported on a Cluster; Inspect and ForceUnlock work on
// both). The other lock kinds, the Inspector, Fence and
// Optimistic take a go-redis client only.
//
// A Transport's methods are called concurrently.
type Transport interface {
	// Do runs the command line args (its name first) on the server and
	// returns its reply: an integer as an int64, a simple or bulk string as
	// a string, an array as a []any of such values (an error element as a
	// ServerError), a nil reply as nil with a nil error. An error reply is
	// returned as an error matching a ServerError (errors.As) that carries
	// the server's text ("NOSCRIPT No matching script", "WRONGTYPE ...");
	// other errors (network, context) as they are. args[first:first+keys]
	// are the command's keys (keys is 0 for a command without keys, such as
	// PUBLISH), by which a Cluster client routes it; the keys of one call
	// share a hash slot. Once the client is closed, Do returns an error
	// matching ErrTransportClosed. args may not be kept after Do returns.
	Do(ctx context.Context, args []string, first, keys int) (any, error)
	// Subscribe returns a new subscription connection (which may be opened
	// on first use), subscribed to nothing yet. With sharded, its Subscribe
	// and Unsubscribe are SSUBSCRIBE and SUNSUBSCRIBE, each channel on the
	// Cluster master that serves its slot.
	Subscribe(sharded bool) Subscription
	// Cluster reports whether the server is a Redis Cluster: wake-ups then
	// go over sharded pub/sub, and no keyspace notification is watched.
	Cluster() bool
	// DB is the database the client uses on a single server or a Sentinel
	// master, whose keyspace notifications tell of a lock removed; a
	// negative DB watches none.
	DB() int
}

// Subscription is a pub/sub connection of a Transport, used by one goroutine
// at a time for Receive and by another for the subscribing methods.
type Subscription interface {
	// Subscribe subscribes to channels (SSUBSCRIBE on a sharded Subscription).
	Subscribe(ctx context.Context, channels ...string) error
	// Unsubscribe unsubscribes from channels.
	Unsubscribe(ctx context.Context, channels ...string) error
	// PSubscribe subscribes to the channels that match patterns (never called
	// on a sharded Subscription).
	PSubscribe(ctx context.Context, patterns ...string) error
	// Receive returns the next message or subscription confirmation, or an
	// error. When the connection drops, Receive returns an error and
	// reconnects: the channels and patterns subscribed are subscribed again,
	// and their confirmations are returned in turn, so that the waiters,
	// which may have missed messages, try again. A refusal of the server
	// (NOPERM) is an error matching a ServerError. Once the Subscription or
	// its client is closed, Receive returns an error matching
	// ErrTransportClosed.
	Receive(ctx context.Context) (Push, error)
	// Close closes the connection; a Receive under way returns.
	Close() error
}

// Push is a message or a subscription confirmation received on a
// Subscription.
type Push struct {
	// Kind is "message" for a message (of a channel, a pattern or a shard
	// channel), otherwise the confirmation's kind as the server names it:
	// "subscribe", "ssubscribe", "psubscribe", "unsubscribe" and so on.
	Kind string
	// Channel is the channel of a message, or the channel or pattern
	// confirmed.
	Channel string
	// Payload is a message's payload.
	Payload string
}

// ServerError is an error reply of the server, as a Transport returns it: the
// reply's text, such as "NOSCRIPT No matching script" or "NOPERM ...".
type ServerError string

// Error implements error.
func (e ServerError) Error() string { return string(e) }

// RedisError marks a ServerError as a reply of the server (go-redis's
// redis.Error), which the locks class by its first word as they do go-redis's.
func (ServerError) RedisError() {}

var (
	// ErrTransportClosed is what a Transport returns once its client is
	// closed.
	ErrTransportClosed = errors.New("redislock: the client is closed")
	// ErrTransportUnsupported is returned for a feature that a Transport
	// does not offer (see Transport); it matches dlock.ErrInvalid and
	// errors.ErrUnsupported.
	ErrTransportUnsupported = fmt.Errorf("%w: redislock: not offered over a Transport (only over a go-redis client): %w", driver.ErrInvalid, errors.ErrUnsupported)
)

// NewOver returns a Client of the plain lock (as New does) that locks through
// t. opts become the defaults of every TryLock and Lock. It returns an error
// matching dlock.ErrInvalid for a nil Transport; it does no I/O.
func NewOver(t Transport, opts ...dlock.Option) (*Client, error) {
	d, err := NewDriverOver(t)
	if err != nil {
		return nil, err
	}
	return dlock.NewClient(d, opts...)
}

// NewDriverOver returns the plain mutex driver over t, configured by opts, as
// NewDriver does over a go-redis client. WithReplicaAck is refused with
// ErrTransportUnsupported.
func NewDriverOver(t Transport, opts ...Option) (*Driver, error) {
	return over(t, opts, newDriver)
}

// NewFairDriverOver returns the fair mutex driver over t, configured by opts,
// as NewFairDriver does over a go-redis client; dlock.NewClient makes a
// Client of the fair lock over it.
func NewFairDriverOver(t Transport, opts ...Option) (*FairDriver, error) {
	return over(t, opts, newFairDriver)
}

// over makes a driver with newDriver over a conn over t.
func over[D any](t Transport, opts []Option, newDriver func(*conn, []Option) (D, error)) (D, error) {
	c, err := newConnOver(t)
	if err != nil {
		var none D
		return none, err
	}
	return newDriver(c, opts)
}

func newConnOver(t Transport) (*conn, error) {
	if driver.IsNil(t) {
		return nil, fmt.Errorf("%w: nil redislock.Transport", driver.ErrInvalid)
	}
	w := &overWire{t: t}
	return &conn{sc: w, w: w, hub: newHub(w)}, nil
}

// overWire is the wire of the locks over a Transport: the script calls of
// go-redis (Script.Run, Lean.Run) are turned into command lines for it.
type overWire struct {
	redis.Scripter // never called: the methods below are
	t              Transport
}

// do runs the command line argv, whose keys begin at first, and returns its
// reply as go-redis's Result would: a nil reply is redis.Nil.
func (w *overWire) do(ctx context.Context, argv []any, first, keys int) (any, error) {
	args := make([]string, len(argv))
	for i, a := range argv {
		args[i] = argString(a)
	}
	v, err := w.t.Do(ctx, args, first, keys)
	if err == nil && v == nil {
		err = redis.Nil
	}
	return v, err
}

// script runs EVAL or EVALSHA (cmd) of script with keys and args.
func (w *overWire) script(ctx context.Context, cmd, script string, keys []string, args []any) *redis.Cmd {
	argv := make([]any, 0, 3+len(keys)+len(args))
	argv = append(argv, cmd, script, strconv.Itoa(len(keys)))
	for _, k := range keys {
		argv = append(argv, k)
	}
	argv = append(argv, args...)
	return redis.NewCmdResult(w.do(ctx, argv, 3, len(keys)))
}

// Eval implements redis.Scripter.
func (w *overWire) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return w.script(ctx, "EVAL", script, keys, args)
}

// EvalSha implements redis.Scripter.
func (w *overWire) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return w.script(ctx, "EVALSHA", sha1, keys, args)
}

// Process implements redisscript.Processor for the Lean scripts' command
// lines: argv[2] is the number of keys, which follow it.
func (w *overWire) Process(ctx context.Context, cmd redis.Cmder) error {
	argv := cmd.Args()
	keys := 0
	if len(argv) > 2 {
		keys, _ = strconv.Atoi(argString(argv[2]))
	}
	v, err := w.do(ctx, argv, 3, keys)
	if c, ok := cmd.(*redis.Cmd); ok {
		c.SetVal(v)
	}
	cmd.SetErr(err)
	return err
}

func (w *overWire) ring() bool    { return false }
func (w *overWire) sharded() bool { return w.t.Cluster() }

func (w *overWire) keyspaceDB() (int, bool) {
	if db := w.t.DB(); db >= 0 && !w.t.Cluster() {
		return db, true
	}
	return 0, false
}

// node returns "": the Transport's sharded Subscription routes each channel
// to its master itself.
func (w *overWire) node(context.Context, string) (string, func(sharded bool) Subscription, error) {
	return "", w.t.Subscribe, nil
}

func (w *overWire) subscribe() Subscription { return w.t.Subscribe(false) }

func (w *overWire) publish(ctx context.Context, channel, message string) error {
	_, err := w.t.Do(ctx, []string{"PUBLISH", channel, message}, 1, 0)
	return err
}

func (w *overWire) get(ctx context.Context, key string) (string, error) {
	v, err := w.do(ctx, []any{"GET", key}, 1, 1)
	s, _ := v.(string)
	return s, err
}

// argString is a command line argument as a string: go-redis's own
// formatting of the values the locks pass.
func argString(a any) string {
	switch v := a.(type) {
	case string:
		return v
	case *string:
		return *v
	case int64:
		return strconv.FormatInt(v, 10)
	case *int64:
		return strconv.FormatInt(*v, 10)
	case int:
		return strconv.Itoa(v)
	case uint64:
		return strconv.FormatUint(v, 10)
	case []byte:
		return string(v)
	case bool:
		if v {
			return "1"
		}
		return "0"
	case nil:
		return ""
	}
	return fmt.Sprint(a)
}

// scanOver returns the names of the locks whose keys match match, scanned on
// the single server behind a Transport.
func (c *conn) scanOver(ctx context.Context, match string) ([]string, error) {
	if c.w.sharded() {
		return nil, fmt.Errorf("%w: listing the locks of a Redis Cluster", ErrTransportUnsupported)
	}
	w := c.w.(*overWire)
	var names []string
	cursor := "0"
	for range 1 << 20 { // bounded: a SCAN ends long before
		res, err := w.do(ctx, []any{"SCAN", cursor, "MATCH", match, "COUNT", "1000"}, 0, 0)
		page, _ := res.([]any)
		if err != nil || len(page) != 2 {
			return nil, mapErr(errors.Join(err, errors.New("redislock: unexpected SCAN reply")))
		}
		keys, _ := page[1].([]any)
		for _, k := range keys {
			if s, ok := k.(string); ok {
				if name, ok := lockName(s); ok {
					names = append(names, name)
				}
			}
		}
		if cursor, _ = page[0].(string); cursor == "0" || cursor == "" {
			break
		}
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}
