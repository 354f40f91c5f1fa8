package testserver

import (
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
