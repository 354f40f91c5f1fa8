package redislock_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"
)

// serverCalls counts the commands a server has run, from INFO commandstats
// (every call a script makes, and the script call itself), less its own
// bookkeeping and connection set-up.
func serverCalls(t testing.TB, admin *redis.Client) int64 {
	t.Helper()
	s, err := admin.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(s, "\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_"), ":")
		if !ok || name == "info" || name == "hello" || name == "psubscribe" || name == "subscribe" || name == "ping" || strings.HasPrefix(name, "client|") {
			continue
		}
		if v, ok := strings.CutPrefix(rest, "calls="); ok {
			v, _, _ = strings.Cut(v, ",")
			c, _ := strconv.ParseInt(v, 10, 64)
			n += c
		}
	}
	return n
}

// TestFairServerCommands: the fair lock's cost on the server, counted exactly
// (INFO commandstats on a server of the test's own, script calls included): an
// uncontended lock and unlock takes 6 commands (the acquire script, MGET,
// TIME, SET; the release script, SET ... GET); under contention, Clients
// taking turns, a critical section takes at most 16 (the waiter's attempt that
// queues it: 5, the release that hands the lock over and wakes it: 7, its
// claim: 3).
func TestFairServerCommands(t *testing.T) {
	s, admin := startRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key := dlocktest.Key(t)
	newFair := func() *redislock.Client {
		c, err := redislock.NewFair(newRDB(t, s.Addr), dlock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := newFair()
	cycle := func(c *redislock.Client) error {
		l, err := c.Lock(ctx, key)
		if err != nil {
			return err
		}
		return l.Unlock(ctx)
	}
	if err := cycle(c); err != nil { // loads the scripts
		t.Fatal(err)
	}
	const n = 50
	before := serverCalls(t, admin)
	for range n {
		if err := cycle(c); err != nil {
			t.Fatal(err)
		}
	}
	got := float64(serverCalls(t, admin)-before) / n
	t.Logf("uncontended: %.2f server commands per cycle", got)
	if got > 6 {
		t.Errorf("uncontended: %.2f server commands per cycle, want at most 6", got)
	}

	// Contended: G Clients, one per contender, as separate processes are.
	const g, each = 8, 25
	cs := make([]*redislock.Client, g)
	for i := range cs {
		cs[i] = newFair()
	}
	hold, err := c.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	before = serverCalls(t, admin)
	var eg errgroup.Group
	for _, c := range cs {
		eg.Go(func() error {
			for range each {
				if err := cycle(c); err != nil {
					return err
				}
			}
			return nil
		})
	}
	eventually(t, "every Client queued", func() bool {
		info, err := c.Inspect(ctx, key)
		return err == nil && info.Waiters == g
	})
	if err := hold.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := eg.Wait(); err != nil {
		t.Fatal(err)
	}
	per := float64(serverCalls(t, admin)-before) / (g * each)
	t.Logf("contended, %d Clients: %.2f server commands per critical section", g, per)
	if per > 16 {
		t.Errorf("contended: %.2f server commands per critical section, want at most 16", per)
	}
}
