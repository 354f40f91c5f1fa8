package redlock_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// serverCalls sums the calls per command of every server (see
// testserver.CommandCalls).
func serverCalls(t testing.TB, rdbs []*redis.Client) map[string]int64 {
	t.Helper()
	calls := map[string]int64{}
	for _, rdb := range rdbs {
		testserver.CommandCalls(t, rdb, calls)
	}
	return calls
}

// TestCommandsPerUncontendedCycle counts the servers' commands per lock and
// unlock over five masters of the test's own: each node runs redislock's
// acquire and release (five commands a cycle with the scripts' own calls), and
// the round that records the token on the majority is needed only on the
// first acquisition, whose nodes drew their tokens from their own clocks: each
// release records the token handed out on every node, so their next tokens
// agree.
func TestCommandsPerUncontendedCycle(t *testing.T) {
	var at []string
	var admins []*redis.Client
	for range 5 {
		s := testserver.StartRedis(t)
		at = append(at, s.Addr)
		admins = append(admins, newRDB(t, s.Addr))
	}
	c := newClientAt(t, at, nil)
	ctx := ctxT(t, time.Minute)
	key := dlocktest.Key(t)
	var last uint64
	cycle := func() {
		l, err := c.TryLock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if l.Token() <= last {
			t.Fatalf("token %d not above %d", l.Token(), last)
		}
		last = l.Token()
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		// Unlock returns once a majority released: wait for the others, so
		// that the next cycle finds every node free and the counts are exact.
		// (STRLEN is left out of the counts: a released record is the token
		// alone, a held one has its owner.)
		for _, a := range admins {
			for a.StrLen(ctx, redislock.LockKey(key)).Val() > 16 {
				select {
				case <-ctx.Done():
					t.Fatal("a node's release never landed")
				case <-time.After(time.Millisecond):
				}
			}
		}
	}
	cycle() // identifies the servers, loads the scripts, draws from the clocks
	const n = 50
	before := serverCalls(t, admins)
	for range n {
		cycle()
	}
	after := serverCalls(t, admins)
	per := map[string]int64{}
	var total int64
	for name, v := range after {
		if d := v - before[name]; d > 0 && name != "strlen" {
			per[name] = d
			total += d
		}
	}
	want := map[string]int64{"evalsha": 2 * 5 * n, "mget": 5 * n, "set": 2 * 5 * n}
	if total != 25*n || fmt.Sprint(per) != fmt.Sprint(want) {
		t.Errorf("%d cycles: %d server commands %v, want %d %v", n, total, per, 25*n, want)
	}
}
