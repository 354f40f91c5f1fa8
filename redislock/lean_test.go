package redislock_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// The server's work per operation of the plain lock, counted by a redis-server
// of the test's own (INFO commandstats counts the calls a script makes, and the
// EVALSHA that runs it). The counts are exact; a change that makes them grow
// must change these tests too.

// callsSince returns the calls per command since before, and their total.
func callsSince(t testing.TB, rdb *redis.Client, before map[string]int64) (map[string]int64, int64) {
	t.Helper()
	d := map[string]int64{}
	var total int64
	for name, n := range testserver.CommandCalls(t, rdb, nil) {
		if n -= before[name]; n > 0 {
			d[name] = n
			total += n
		}
	}
	return d, total
}

func TestPlainCommandsPerUncontendedCycle(t *testing.T) {
	own := testserver.StartRedis(t)
	admin := newRDB(t, own.Addr)
	c, err := redislock.New(newRDB(t, own.Addr))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	key := dlocktest.Key(t)
	cycle := func() {
		l, err := c.TryLock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cycle() // loads the scripts, and draws the first token from the server clock
	const n = 100
	before := testserver.CommandCalls(t, admin, nil)
	for range n {
		cycle()
	}
	per, total := callsSince(t, admin, before)
	// Acquire: EVALSHA, MGET (record, abandon mark, fence counter), TIME (the
	// token is never below the clock), SET PX. Release: EVALSHA, SET KEEPTTL GET.
	want := map[string]int64{"evalsha": 2 * n, "mget": n, "set": 2 * n, "time": n}
	if total != 6*n || fmt.Sprint(per) != fmt.Sprint(want) {
		t.Errorf("%d cycles: %d server commands %v, want %d %v", n, total, per, 6*n, want)
	}
}

func TestPlainCommandsPerContendedCriticalSection(t *testing.T) {
	for _, g := range []int{16, 64} {
		t.Run(strconv.Itoa(g), func(t *testing.T) {
			own := testserver.StartRedis(t)
			admin := newRDB(t, own.Addr)
			ctx := context.Background()
			key := dlocktest.Key(t)
			clients := make([]*redislock.Client, g)
			for i := range clients {
				// A Client (and a go-redis client) per contender, as separate
				// processes would have.
				rdb := testserver.RedisClient(t, own.Addr, func(o *redis.Options) { o.PoolSize = 2 })
				c, err := redislock.New(rdb, dlock.WithWait(10*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				clients[i] = c
			}
			const perContender = 10
			before := testserver.CommandCalls(t, admin, nil)
			var wg sync.WaitGroup
			var mu sync.Mutex
			var inside, sections, overlaps int
			for _, c := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range perContender {
						l, err := c.Lock(ctx, key)
						if err != nil {
							t.Errorf("lock: %v", err)
							return
						}
						mu.Lock()
						inside++
						if inside > 1 {
							overlaps++
						}
						sections++
						inside--
						mu.Unlock()
						if err := l.Unlock(ctx); err != nil {
							t.Errorf("unlock: %v", err)
							return
						}
					}
				}()
			}
			wg.Wait()
			per, total := callsSince(t, admin, before)
			// Not the lock's: the waiters' subscriptions, and a new
			// connection's handshake (how many connections a pool opens
			// depends on the scheduling, not on the lock).
			lockCalls := total
			for _, name := range []string{"subscribe", "unsubscribe", "client|setinfo", "hello"} {
				lockCalls -= per[name]
				delete(per, name)
			}
			perCS := float64(lockCalls) / float64(sections)
			t.Logf("G=%d: %d critical sections, %.2f server lock commands each: %v", g, sections, perCS, per)
			if sections != g*perContender || overlaps != 0 {
				t.Errorf("%d critical sections with %d overlaps, want %d and none", sections, overlaps, g*perContender)
			}
			if perCS > contendedBound {
				t.Errorf("%.2f server lock commands per critical section, want at most %v", perCS, contendedBound)
			}
		})
	}
}

// contendedBound bounds the server's lock commands per critical section of
// TestPlainCommandsPerContendedCriticalSection (a grant's TIME included, a
// hand-over's PUBSUB NUMSUB, which finds a live process to wake, and the
// queue's ZADD and ZPOPMIN). The count moves with the scheduling (a woken
// waiter that finds the lock taken again tries once more): over 30 runs on an
// idle host, a median of 13.9 and at most 14.3 at G = 16 and 64, on
// redis-server and valkey-server alike; the bound leaves room for a loaded
// host, and two commands more per hand-over cross it.
const contendedBound = 15.5

func TestPlainMemoryPerHeldLock(t *testing.T) {
	own := testserver.StartRedis(t)
	admin := newRDB(t, own.Addr)
	c, err := redislock.New(newRDB(t, own.Addr), dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	used := func() int64 {
		s := admin.Info(ctx, "memory").Val()
		for _, line := range strings.Split(s, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		t.Fatal("no used_memory in INFO memory")
		return 0
	}
	const k = 2000
	// One lock first: the connection and the script cache are not the locks'.
	warm, err := c.TryLock(ctx, "warm")
	if err != nil {
		t.Fatal(err)
	}
	defer warm.Unlock(ctx)
	// ... nor is the connection that tells the holder of a force-unlock.
	// Its first check of the holdings (on a connection of the pool's own) is
	// done when the scripts' calls stop changing.
	eventually(t, "the loss subscription", func() bool {
		return admin.PubSubNumSub(ctx, redislock.Prefix+"lost").Val()[redislock.Prefix+"lost"] == 1
	})
	quiet(t, func() int64 { return testserver.CommandCalls(t, admin, nil)["evalsha"] })
	before := used()
	leases := make([]*dlock.Lease, 0, k)
	for i := range k {
		l, err := c.TryLock(ctx, fmt.Sprintf("bench-lock-%05d", i))
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	perLock := float64(used()-before) / k
	t.Logf("%.0f bytes of server memory per held lock; keys %d; %q, %d", perLock, admin.DBSize(ctx).Val(), admin.Get(ctx, redislock.LockKey("bench-lock-00001")).Val(), admin.MemoryUsage(ctx, redislock.LockKey("bench-lock-00001")).Val())
	if perLock > 200 {
		t.Errorf("%.0f bytes of server memory per held lock, want at most 200", perLock)
	}
	for _, l := range leases {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// releasedRecord reports whether the lock key of the lock named key holds a
// released plain lock record: the lock's newest token, kept until the TTL of
// its last holding runs out, and nothing else.
func releasedRecord(ctx context.Context, rdb redis.UniversalClient, key string) bool {
	v, err := rdb.Get(ctx, redislock.LockKey(key)).Result()
	if err != nil {
		return false
	}
	r, ok := redislock.ParseRecord(v)
	return ok && r.Owner == "" && rdb.PTTL(ctx, redislock.LockKey(key)).Val() > 0
}

// waitedFor reports whether the holding of the lock named key is marked as one
// that a waiter waits for: the plain lock record's flag, or a lock hash's field w.
func waitedFor(ctx context.Context, rdb redis.UniversalClient, key string) bool {
	if v, err := rdb.Get(ctx, redislock.LockKey(key)).Result(); err == nil {
		r, ok := redislock.ParseRecord(v)
		return ok && r.Waited
	}
	return rdb.HExists(ctx, redislock.LockKey(key), "w").Val()
}

// allocBound bounds the client's allocations per uncontended lock and unlock
// cycle of the plain lock (TryLock or Lock, then Unlock, with a fixed TTL):
// about 9 are go-redis's (its command, its connection check, the reply), 8 the
// lease's (the lease, its context, its timer, the owner token, the options)
// and 3 the driver's (the keys, the grant's Handle, the token of the
// release).
const allocBound = 21

func TestPlainAllocsPerUncontendedCycle(t *testing.T) {
	if raceOn {
		t.Skip("the race detector changes what allocates")
	}
	c := newClient(t, dlock.WithTTL(10*time.Second))
	ctx := context.Background()
	key := dlocktest.Key(t)
	for _, tc := range []struct {
		name string
		lock func() (*dlock.Lease, error)
	}{
		{"TryLock", func() (*dlock.Lease, error) { return c.TryLock(ctx, key) }},
		{"Lock", func() (*dlock.Lease, error) { return c.Lock(ctx, key) }},
	} {
		cycle := func() {
			l, err := tc.lock()
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
		cycle() // loads the scripts
		if n := testing.AllocsPerRun(200, cycle); n > allocBound {
			t.Errorf("%s + Unlock: %.1f allocations per cycle, want at most %d", tc.name, n, allocBound)
		} else {
			t.Logf("%s + Unlock: %.1f allocations per cycle", tc.name, n)
		}
	}
}
