package testserver

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// CommandCalls adds to calls the calls per command that rdb's server reports
// in INFO commandstats (the commands a Lua script runs included), without the
// test's own bookkeeping (INFO, CONFIG, HELLO, CLIENT, PING, SELECT, SCRIPT,
// MEMORY, DBSIZE, FLUSHALL) and the subscriptions (SUBSCRIBE, PSUBSCRIBE and
// their undoing: the wake-ups' of waiters, and the one that tells a Client's
// holders of pushed losses, once per Client while it holds locks, not once
// per lock, sent when its first lock is taken), and returns calls (a new map
// when nil).
func CommandCalls(t testing.TB, rdb *redis.Client, calls map[string]int64) map[string]int64 {
	t.Helper()
	if calls == nil {
		calls = map[string]int64{}
	}
	s, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(s, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		switch name {
		case "info", "config", "hello", "client", "ping", "select", "script", "memory", "dbsize", "flushall", "subscribe", "unsubscribe", "psubscribe", "punsubscribe":
			continue
		}
		n, _, _ := strings.Cut(rest, ",")
		v, err := strconv.ParseInt(n, 10, 64)
		if err != nil {
			t.Fatalf("commandstats line %q: %v", line, err)
		}
		calls[name] += v
	}
	return calls
}
