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
// acquire and release (six commands a cycle with the scripts' own calls), and
// the round that records the token handed out on the granting majority runs on
// the nodes that drew less: every node draws from its own clock, so that a node
// that lost its state (a crash, a failover) still draws a larger token.
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
	// Each node's acquire: EVALSHA, MGET, TIME, SET; its release: EVALSHA, SET.
	// A raise (EVALSHA, GET, SET) on each granting node that drew less than the
	// token handed out: the nodes draw from their own clocks.
	// (A node that never raised before loads the script with EVAL.)
	total -= per["eval"]
	delete(per, "eval")
	raises := per["get"]
	want := map[string]int64{"evalsha": 2*5*n + raises, "mget": 5 * n, "set": 2*5*n + raises, "time": 5 * n}
	if raises > 0 {
		want["get"] = raises
	}
	if total != 30*n+3*raises || fmt.Sprint(per) != fmt.Sprint(want) || raises > 2*n {
		t.Errorf("%d cycles: %d server commands %v, want %d %v (at most two raises a cycle)", n, total, per, 30*n+3*raises, want)
	}
	t.Logf("%d cycles: %d raises", n, raises)
}

// maxAllocsPerCycle bounds the client's heap allocations per uncontended Lock
// and Unlock over five masters (the request to the nodes, each node's scripts
// through go-redis, the Lease): about 380 when it was set.
const maxAllocsPerCycle = 410

// TestAllocationsPerUncontendedCycle fails when the client's allocations per
// uncontended lock and unlock grow past maxAllocsPerCycle. Those of the calls
// still on their way when Unlock returns are counted with the next cycle's.
func TestAllocationsPerUncontendedCycle(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t, time.Minute)
	key := dlocktest.Key(t)
	dlocktest.AllocsPerCycle(t, ctx, c, key, 200, maxAllocsPerCycle)
}
