// Package dlockrueidis runs dlock's Redis locks (package redislock: the plain
// lock and the fair lock) over a rueidis client, and, in package dlockvalkey,
// over a valkey-go client: the same scripts, tokens, waiting, renewal, loss
// push and Cluster support as over go-redis, through redislock's own code,
// which sends its commands through a redislock.Transport.
//
//	rc, _ := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
//	locker, _ := dlockrueidis.New(rc, dlock.WithTTL(10*time.Second))
//	err := dlock.Do(ctx, locker, "orders:42", func(ctx context.Context) error {
//		return process(ctx) // runs alone, while the lease is renewed
//	})
//
// rueidis pipelines the commands of concurrent callers on one connection,
// and a waiter's wake-ups arrive on that connection too (RESP3 pushes), each
// key's channel subscribed by a Receive call of its own, which the client
// routes to the Cluster master of the channel's slot. What redislock does not
// offer over a Transport (replica acknowledgements, listing the locks; see
// redislock.Transport) fails with redislock.ErrTransportUnsupported.
package dlockrueidis

import (
	"context"
	"fmt"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockrueidis/internal/adapt"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/rueidis"
)

// New returns a Client of redislock's plain lock over c, with opts as the
// defaults of every TryLock and Lock. It returns an error matching
// dlock.ErrInvalid for a nil client; it does no I/O. c must use database 0
// (see Transport, and redislock.NewFairDriverOver for the fair lock).
func New(c rueidis.Client, opts ...dlock.Option) (*dlock.Client, error) {
	t, err := Transport(c, 0)
	return adapt.NewClient(t, err, opts)
}

// Transport returns the redislock.Transport over c, whose selected database
// (rueidis.ClientOption.SelectDB) is db: holders are told at once of a lock
// removed in it when the server sends keyspace notifications. Pass it to
// redislock.NewDriverOver for the driver options (redislock.Option).
func Transport(c rueidis.Client, db int) (redislock.Transport, error) {
	if driver.IsNil(c) {
		return nil, fmt.Errorf("%w: dlockrueidis: nil rueidis client", dlock.ErrInvalid)
	}
	b := c.B()
	kit := adapt.Kit[rueidis.Completed, rueidis.PubSubMessage]{
		Command: func(a []string, f, k int) rueidis.Completed {
			return b.Arbitrary(a[:f]...).Keys(a[f : f+k]...).Args(a[f+k:]...).Build()
		},
		Subscribe:    func(ch string) rueidis.Completed { return b.Subscribe().Channel(ch).Build() },
		SSubscribe:   func(ch string) rueidis.Completed { return b.Ssubscribe().Channel(ch).Build() },
		PSubscribe:   func(p string) rueidis.Completed { return b.Psubscribe().Pattern(p).Build() },
		Unsubscribe:  func(ch string) rueidis.Completed { return b.Unsubscribe().Channel(ch).Build() },
		SUnsubscribe: func(ch string) rueidis.Completed { return b.Sunsubscribe().Channel(ch).Build() },
		Hook: func(ctx context.Context, fn func(kind, channel string)) context.Context {
			return rueidis.WithOnSubscriptionHook(ctx, func(s rueidis.PubSubSubscription) { fn(s.Kind, s.Channel) })
		},
		Message:     func(m rueidis.PubSubMessage) (string, string) { return m.Channel, m.Message },
		IsNil:       rueidis.IsRedisNil,
		ServerError: serverError,
		Closing:     rueidis.ErrClosing,
	}
	cluster := c.Mode() == rueidis.ClientModeCluster
	return adapt.Transport(adapt.New[rueidis.Completed, rueidis.RedisResult, rueidis.PubSubMessage, rueidis.RedisMessage](c, kit, cluster, db)), nil
}

// serverError returns the text of a server error reply.
func serverError(err error) (string, bool) {
	if re, ok := rueidis.IsRedisErr(err); ok {
		return re.Error(), true
	}
	return "", false
}
