package testserver

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisClient returns a client of the redis-server at addr for a test, closed
// when the test ends. Each request is bounded by its context
// (ContextTimeoutEnabled) and never retried (MaxRetries -1), so that a test sees
// every failure of the server; adjust changes further options before the
// client is made.
func RedisClient(t testing.TB, addr string, adjust ...func(*redis.Options)) *redis.Client {
	o := &redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1}
	for _, f := range adjust {
		f(o)
	}
	rdb := redis.NewClient(o)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Eventually polls cond every 5ms until it holds, and fails the test naming
// what when it still does not hold after within: for a state another client or
// process changes, which no event announces.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(within); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// lossChannel is the channel on which redislock's loss subscriptions listen.
const lossChannel = "dlock:lost"

// OpenLossWatch runs cycle (a lock taken and released through the Client under
// test), and waits until one more connection to the server at addr than
// before is subscribed to the loss channel: the Client's loss subscription,
// which lingers, is open. A Client checks its holdings once when it
// subscribes, which would find a loss that a test leaves to a renewal; a test
// that does opens the subscription first.
func OpenLossWatch(t testing.TB, addr string, cycle func(context.Context) error) {
	t.Helper()
	ctx := context.Background()
	probe := RedisClient(t, addr)
	before := probe.PubSubNumSub(ctx, lossChannel).Val()[lossChannel]
	if err := cycle(ctx); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 5*time.Second, "the Client's loss subscription", func() bool {
		return probe.PubSubNumSub(ctx, lossChannel).Val()[lossChannel] > before
	})
}
