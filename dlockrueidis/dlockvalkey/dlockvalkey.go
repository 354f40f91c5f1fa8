// Package dlockvalkey runs dlock's Redis locks (package redislock: the plain
// lock and the fair lock) over a valkey-go client, on Valkey or Redis, as
// package dlockrueidis does over rueidis (valkey-go is its fork, with the
// same pipelining and the same pub/sub): the same scripts, tokens, waiting,
// renewal, loss push and Cluster support as over go-redis.
//
//	vc, _ := valkey.NewClient(valkey.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
//	locker, _ := dlockvalkey.New(vc, dlock.WithTTL(10*time.Second))
package dlockvalkey

import (
	"context"
	"fmt"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockrueidis/internal/adapt"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/redislock"
	"github.com/valkey-io/valkey-go"
)

// New returns a Client of redislock's plain lock over c, with opts as the
// defaults of every TryLock and Lock. It returns an error matching
// dlock.ErrInvalid for a nil client; it does no I/O. c must use database 0
// (see Transport, and redislock.NewFairDriverOver for the fair lock).
func New(c valkey.Client, opts ...dlock.Option) (*dlock.Client, error) {
	t, err := Transport(c, 0)
	return adapt.NewClient(t, err, opts)
}

// Transport returns the redislock.Transport over c, whose selected database
// (valkey.ClientOption.SelectDB) is db: holders are told at once of a lock
// removed in it when the server sends keyspace notifications. Pass it to
// redislock.NewDriverOver for the driver options (redislock.Option).
func Transport(c valkey.Client, db int) (redislock.Transport, error) {
	if driver.IsNil(c) {
		return nil, fmt.Errorf("%w: dlockvalkey: nil valkey client", dlock.ErrInvalid)
	}
	b := c.B()
	kit := adapt.Kit[valkey.Completed, valkey.PubSubMessage]{
		Command: func(a []string, f, k int) valkey.Completed {
			return b.Arbitrary(a[:f]...).Keys(a[f : f+k]...).Args(a[f+k:]...).Build()
		},
		Subscribe:    func(ch string) valkey.Completed { return b.Subscribe().Channel(ch).Build() },
		SSubscribe:   func(ch string) valkey.Completed { return b.Ssubscribe().Channel(ch).Build() },
		PSubscribe:   func(p string) valkey.Completed { return b.Psubscribe().Pattern(p).Build() },
		Unsubscribe:  func(ch string) valkey.Completed { return b.Unsubscribe().Channel(ch).Build() },
		SUnsubscribe: func(ch string) valkey.Completed { return b.Sunsubscribe().Channel(ch).Build() },
		Hook: func(ctx context.Context, fn func(kind, channel string)) context.Context {
			return valkey.WithOnSubscriptionHook(ctx, func(s valkey.PubSubSubscription) { fn(s.Kind, s.Channel) })
		},
		Message:     func(m valkey.PubSubMessage) (string, string) { return m.Channel, m.Message },
		IsNil:       valkey.IsValkeyNil,
		ServerError: serverError,
		Closing:     valkey.ErrClosing,
	}
	cluster := c.Mode() == valkey.ClientModeCluster
	return adapt.Transport(adapt.New[valkey.Completed, valkey.ValkeyResult, valkey.PubSubMessage, valkey.ValkeyMessage](c, kit, cluster, db)), nil
}

// serverError returns the text of a server error reply.
func serverError(err error) (string, bool) {
	if ve, ok := valkey.IsValkeyErr(err); ok {
		return ve.Error(), true
	}
	return "", false
}
