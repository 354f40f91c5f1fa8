package redislock

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlock-go/dlock/internal/redisscript"
	"github.com/redis/go-redis/v9"
)

// scripter runs the scripts: go-redis's Script.Run and Lean.Run call it.
type scripter interface {
	redis.Scripter
	redisscript.Processor
}

// wire is what the locks need of a client beyond running scripts: the
// subscriptions of the wake-ups and of the loss push, and the topology they
// follow. goWire is it over a go-redis client, overWire over a Transport.
type wire interface {
	scripter
	// ring reports a client with no single subscription (a redis.Ring):
	// waiters poll, and losses are found by the renewals.
	ring() bool
	// sharded reports a Redis Cluster: wake-ups use sharded pub/sub.
	sharded() bool
	// keyspaceDB returns the database whose keyspace notifications tell of
	// the locks (a single server's or a Sentinel master's).
	keyspaceDB() (int, bool)
	// node returns the address of the server that serves channel (the
	// Cluster master of its slot, "" otherwise) and how to open a
	// subscription connection to it.
	node(ctx context.Context, channel string) (addr string, open func(sharded bool) Subscription, err error)
	// subscribe opens a subscription connection for the loss push.
	subscribe() Subscription
	// publish publishes message on channel (every node of a Cluster hears it).
	publish(ctx context.Context, channel, message string) error
	// get reads a string key; a missing key is redis.Nil.
	get(ctx context.Context, key string) (string, error)
}

// goWire is the wire over a go-redis client.
type goWire struct{ redis.UniversalClient }

func (w goWire) ring() bool {
	_, ok := w.UniversalClient.(*redis.Ring)
	return ok
}

func (w goWire) sharded() bool {
	_, ok := w.UniversalClient.(*redis.ClusterClient)
	return ok
}

func (w goWire) keyspaceDB() (int, bool) {
	if c, ok := w.UniversalClient.(*redis.Client); ok {
		return c.Options().DB, true
	}
	return 0, false
}

func (w goWire) node(ctx context.Context, channel string) (string, func(sharded bool) Subscription, error) {
	if w.ring() {
		// A Ring picks a shard per channel, and go-redis panics on a PubSub
		// without one: waiters on a Ring poll.
		return "", nil, fmt.Errorf("redislock: no notifications through a redis.Ring: %w", errors.ErrUnsupported)
	}
	node := w.UniversalClient
	addr := ""
	if cc, ok := node.(*redis.ClusterClient); ok {
		m, err := cc.MasterForKey(ctx, channel)
		if err != nil {
			return "", nil, mapErr(err)
		}
		node, addr = m, m.Options().Addr
	}
	return addr, func(sharded bool) Subscription { return goSubscribe(node, sharded) }, nil
}

func (w goWire) subscribe() Subscription { return goSubscribe(w.UniversalClient, false) }

func (w goWire) publish(ctx context.Context, channel, message string) error {
	return w.Publish(ctx, channel, message).Err()
}

func (w goWire) get(ctx context.Context, key string) (string, error) {
	return w.Get(ctx, key).Result()
}

// goSub is a Subscription over a go-redis PubSub.
type goSub struct {
	ps      *redis.PubSub
	sharded bool
}

func goSubscribe(c redis.UniversalClient, sharded bool) Subscription {
	if sharded {
		return &goSub{ps: c.SSubscribe(context.Background()), sharded: true}
	}
	return &goSub{ps: c.Subscribe(context.Background())}
}

func (s *goSub) Subscribe(ctx context.Context, channels ...string) error {
	if s.sharded {
		return s.ps.SSubscribe(ctx, channels...)
	}
	return s.ps.Subscribe(ctx, channels...)
}

func (s *goSub) Unsubscribe(ctx context.Context, channels ...string) error {
	if s.sharded {
		return s.ps.SUnsubscribe(ctx, channels...)
	}
	return s.ps.Unsubscribe(ctx, channels...)
}

func (s *goSub) PSubscribe(ctx context.Context, patterns ...string) error {
	return s.ps.PSubscribe(ctx, patterns...)
}

func (s *goSub) Receive(ctx context.Context) (Push, error) {
	for {
		msg, err := s.ps.Receive(ctx)
		if errors.Is(err, redis.ErrClosed) {
			return Push{}, fmt.Errorf("%w: %w", ErrTransportClosed, err)
		}
		if err != nil {
			return Push{}, err
		}
		switch m := msg.(type) {
		case *redis.Message:
			return Push{Kind: "message", Channel: m.Channel, Payload: m.Payload}, nil
		case *redis.Subscription:
			return Push{Kind: m.Kind, Channel: m.Channel}, nil
		}
	}
}

func (s *goSub) Close() error { return s.ps.Close() }

// closedErr reports whether err says the client is closed.
func closedErr(err error) bool {
	return errors.Is(err, ErrTransportClosed) || errors.Is(err, redis.ErrClosed)
}
