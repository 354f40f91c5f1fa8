package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"
)

func newSemaphore(t testing.TB, rdb redis.UniversalClient, n int, opts ...dlock.Option) *redislock.Client {
	t.Helper()
	c, err := redislock.NewSemaphore(rdb, n, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// occupyHash stores a foreign hash where the lock named key would live.
func occupyHash(t testing.TB, rdb redis.UniversalClient, key string) func() bool {
	k := redislock.LockKey(key)
	ctx := context.Background()
	if err := rdb.HSet(ctx, k, "user", "data").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Del(ctx, k) })
	return func() bool {
		v := rdb.HGetAll(ctx, k).Val()
		return len(v) == 1 && v["user"] == "data" && rdb.PTTL(ctx, k).Val() == -1
	}
}

// tally counts the commands of several go-redis clients.
type tally []*counter

// rdb returns a new go-redis client whose commands t counts.
func (ts *tally) rdb(t testing.TB) *redis.Client {
	rdb := newRDB(t, srv.Addr)
	cnt := &counter{}
	rdb.AddHook(cnt)
	*ts = append(*ts, cnt)
	return rdb
}

func (ts tally) total() (n int64) {
	for _, c := range ts {
		n += c.n.Load()
	}
	return n
}

// TestSemaphoreOfOneConformance: a semaphore of one permit is a mutex.
func TestSemaphoreOfOneConformance(t *testing.T) {
	dlocktest.Run(t, dlocktest.Backend{
		Info: driver.DriverInfo{Backend: "redislock", Kind: driver.KindSemaphore},
		New: func(t testing.TB, opts ...dlock.Option) dlock.Locker {
			return newSemaphore(t, newRDB(t, srv.Addr), 1, opts...)
		},
		Occupy: func(t testing.TB, key string) func() bool { return occupyHash(t, newRDB(t, srv.Addr), key) },
	})
}

// contend runs clients x goroutines x rounds acquisitions of key through lockers
// made by mk, and returns the most holders seen inside at once. check is called
// inside every critical section.
func contend(t *testing.T, mk func() dlock.Locker, key string, clients, goroutines, rounds int, inside func(l *dlock.Lease) (leave func(), err error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	for c := 0; c < clients; c++ {
		l := mk()
		for i := 0; i < goroutines; i++ {
			g.Go(func() error {
				for r := 0; r < rounds; r++ {
					lease, err := l.Lock(gctx, key)
					if err != nil {
						return err
					}
					leave, err := inside(lease)
					if err != nil {
						return err
					}
					time.Sleep(time.Millisecond) // stay inside a little, so that holders overlap
					leave()
					if err := lease.Unlock(gctx); err != nil {
						return err
					}
				}
				return nil
			})
		}
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}

// TestSemaphoreNeverMoreThanN: holders from several Clients never exceed N, N are
// reached, and tokens are unique.
func TestSemaphoreNeverMoreThanN(t *testing.T) {
	const n, clients, goroutines, rounds = 3, 4, 3, 8
	key := dlocktest.Key(t)
	var in, most atomic.Int32
	var mu sync.Mutex
	tokens := map[uint64]bool{}
	contend(t, func() dlock.Locker { return newSemaphore(t, newRDB(t, srv.Addr), n) }, key, clients, goroutines, rounds,
		func(l *dlock.Lease) (func(), error) {
			v := in.Add(1)
			for m := most.Load(); v > m && !most.CompareAndSwap(m, v); m = most.Load() {
			}
			mu.Lock()
			dup := tokens[l.Token()]
			tokens[l.Token()] = true
			mu.Unlock()
			if v > n {
				return nil, fmt.Errorf("%d holders of a semaphore of %d", v, n)
			}
			if dup {
				return nil, fmt.Errorf("token %d handed out twice", l.Token())
			}
			return func() { in.Add(-1) }, nil
		})
	if most.Load() < 2 {
		t.Errorf("at most %d holders at once: the permits were not shared", most.Load())
	}
	if len(tokens) != clients*goroutines*rounds {
		t.Errorf("%d tokens for %d acquisitions", len(tokens), clients*goroutines*rounds)
	}
	t.Logf("most holders at once: %d of %d", most.Load(), n)
}

// TestSemaphoreCrashedHolderPermitComesBack: a holder that never gives its permit
// back (a crashed process) holds it until its TTL, and not longer.
func TestSemaphoreCrashedHolderPermitComesBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := dlocktest.Key(t)
	const ttl = 600 * time.Millisecond
	rdb := newRDB(t, srv.Addr)
	crashed := newSemaphore(t, rdb, 2)
	a, err := crashed.TryLock(ctx, key, dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	b, err := crashed.TryLock(ctx, key, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	other := newSemaphore(t, newRDB(t, srv.Addr), 2)
	if _, err := other.TryLock(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("third permit of two: %v", err)
	}
	c, err := other.Lock(ctx, key, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	el := time.Since(start)
	if el < ttl/2 || el > ttl+time.Second {
		t.Errorf("permit came back %v after a %v lease was taken", el, ttl)
	}
	if c.Token() <= b.Token() || b.Token() <= a.Token() {
		t.Errorf("tokens %d, %d, %d not increasing", a.Token(), b.Token(), c.Token())
	}
	<-a.Done()
	if err := a.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Unlock of the expired permit: %v", err)
	}
	if ttl, err := c.TTL(ctx); err != nil || ttl < 50*time.Second {
		t.Errorf("new holder's TTL after the stale Unlock: %v, %v", ttl, err)
	}
	for _, l := range []*dlock.Lease{b, c} {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{redislock.LockKey(key), redislock.HoldersKey(key), redislock.QueueKey(key), redislock.QueueDeadlineKey(key)} {
		if rdb.Exists(ctx, k).Val() != 0 {
			t.Errorf("%s left after every permit was given back", k)
		}
	}
}

// TestSemaphoreLimitMismatch: a Client with another N is refused, typed, and
// nothing is mixed.
func TestSemaphoreLimitMismatch(t *testing.T) {
	ctx := context.Background()
	key := dlocktest.Key(t)
	rdb := newRDB(t, srv.Addr)
	three := newSemaphore(t, rdb, 3)
	l, err := three.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	five := newSemaphore(t, rdb, 5)
	for _, f := range []func(context.Context, string, ...dlock.Option) (*dlock.Lease, error){five.TryLock, five.Lock} {
		_, err := f(ctx, key, dlock.WithWait(time.Second))
		if !errors.Is(err, redislock.ErrLimitMismatch) || !errors.Is(err, dlock.ErrConflict) {
			t.Fatalf("lock with another N: %v, want ErrLimitMismatch", err)
		}
	}
	if info, err := three.Inspect(ctx, key); err != nil || info.Holders != 1 || info.Limit != 3 {
		t.Fatalf("Inspect after refused mismatches: %+v, %v", info, err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// Once nothing is held, the semaphore is gone and another N may start it.
	l, err = five.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("N=5 on a free semaphore: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSemaphoreKindConflicts: a key is a semaphore or a mutex, never both.
func TestSemaphoreKindConflicts(t *testing.T) {
	ctx := context.Background()
	rdb := newRDB(t, srv.Addr)
	key := dlocktest.Key(t)
	sem, mu := newSemaphore(t, rdb, 2), newClient(t)
	l, err := sem.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mu.TryLock(ctx, key); !errors.Is(err, dlock.ErrConflict) {
		t.Errorf("mutex on a semaphore: %v", err)
	}
	if _, err := mu.Inspect(ctx, key); !errors.Is(err, dlock.ErrConflict) {
		t.Errorf("mutex Inspect of a semaphore: %v", err)
	}
	_ = l.Unlock(ctx)
	m, err := mu.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unlock(ctx)
	if _, err := sem.TryLock(ctx, key); !errors.Is(err, dlock.ErrConflict) {
		t.Errorf("semaphore on a mutex: %v", err)
	}
}

func TestSemaphoreBadInput(t *testing.T) {
	rdb := newRDB(t, srv.Addr)
	for _, n := range []int{0, -2, -1 << 40, redislock.MaxPermits + 1, 1 << 40} {
		if c, err := redislock.NewSemaphore(rdb, n); !errors.Is(err, dlock.ErrInvalid) || c != nil {
			t.Errorf("NewSemaphore(%d): %v, %v; want ErrInvalid", n, c, err)
		}
	}
	if _, err := redislock.NewSemaphore(nil, 2); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("NewSemaphore(nil): %v", err)
	}
	if _, err := redislock.NewSemaphore(rdb, 2, dlock.WithTTL(-time.Second)); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("NewSemaphore with a bad option: %v", err)
	}
}

// TestSemaphoreWakesOnePerFreedPermit: waiters in several Clients sleep without
// polling, and each release wakes exactly the waiter it hands its permit to.
func TestSemaphoreWakesOnePerFreedPermit(t *testing.T) {
	const n, clients, perClient = 2, 3, 2
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := dlocktest.Key(t)
	probe := newRDB(t, srv.Addr)
	holder := newSemaphore(t, newRDB(t, srv.Addr), n)
	var held []*dlock.Lease
	for i := 0; i < n; i++ {
		l, err := holder.TryLock(ctx, key, dlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	var cnts tally
	got := make(chan *dlock.Lease, clients*perClient)
	g, gctx := errgroup.WithContext(ctx)
	for i := 0; i < clients; i++ {
		c := newSemaphore(t, cnts.rdb(t), n)
		openLossWatch(t, ctx, c, fmt.Sprint(key, "-warm-", i)) // its first check is not the hand-over's
		for j := 0; j < perClient; j++ {
			g.Go(func() error {
				l, err := c.Lock(gctx, key, dlock.WithTTL(time.Minute))
				if err == nil {
					got <- l
				}
				return err
			})
		}
	}
	total := cnts.total
	eventually(t, "every waiter queued", func() bool { return probe.LLen(ctx, redislock.QueueKey(key)).Val() == clients*perClient })
	lossWatchers(t, ctx, probe, clients+1)
	quiet(t, total)
	// Hand the permits through the queue: each release lets exactly one waiter in.
	before := total()
	pending := held
	for done := 0; done < clients*perClient; done++ {
		if err := pending[0].Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		pending = append(pending[1:], <-got)
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	// Each hand-over: the waiter's claiming attempt, its release later (counted
	// in the next round), plus refreshes of queue entries (one a second each).
	spent := total() - before
	t.Logf("%d commands for %d hand-overs", spent, clients*perClient)
	if limit := int64(2 * clients * perClient); spent > limit {
		t.Errorf("%d commands for %d hand-overs, more than %d: waiters woken in vain", spent, clients*perClient, limit)
	}
	for _, l := range pending {
		_ = l.Unlock(ctx)
	}
}

// TestSemaphoreCancelledWaiterLeavesNothing: a waiter that gives up leaves no queue
// entry, and a permit handed to it at that moment goes on.
func TestSemaphoreCancelledWaiterLeavesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := dlocktest.Key(t)
	probe := newRDB(t, srv.Addr)
	c := newSemaphore(t, newRDB(t, srv.Addr), 1)
	l, err := c.TryLock(ctx, key, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := newSemaphore(t, newRDB(t, srv.Addr), 1).Lock(wctx, key)
		done <- err
	}()
	eventually(t, "waiter queued", func() bool { return probe.LLen(ctx, redislock.QueueKey(key)).Val() == 1 })
	if info, err := c.Inspect(ctx, key); err != nil || info.Waiters != 1 || info.Holders != 1 {
		t.Errorf("Inspect with a waiter: %+v, %v", info, err)
	}
	wcancel()
	if err := <-done; !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Lock: %v", err)
	}
	for _, k := range []string{redislock.QueueKey(key), redislock.QueueDeadlineKey(key)} {
		if probe.Exists(ctx, k).Val() != 0 {
			t.Errorf("%s left behind", k)
		}
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// Cancellations at random instants, with the permit changing hands.
	for i := 0; i < 30; i++ {
		wctx, wcancel := context.WithTimeout(ctx, time.Duration(i%10)*300*time.Microsecond)
		l, err := c.Lock(wctx, key, dlock.WithTTL(time.Second))
		wcancel()
		if err == nil {
			_ = l.Unlock(ctx)
		}
	}
	for _, k := range []string{redislock.QueueKey(key), redislock.QueueDeadlineKey(key), redislock.HoldersKey(key), redislock.LockKey(key)} {
		if k == redislock.HoldersKey(key) || k == redislock.LockKey(key) {
			// A permit taken by an attempt in flight is given back at the latest at its TTL.
			eventually(t, k+" gone", func() bool { return probe.Exists(ctx, k).Val() == 0 })
			continue
		}
		if probe.Exists(ctx, k).Val() != 0 {
			t.Errorf("%s left behind after cancelled waits", k)
		}
	}
}

// TestSemaphoreInspect shows permits in use, N, and ForceUnlock frees them all.
func TestSemaphoreInspect(t *testing.T) {
	ctx := context.Background()
	key := dlocktest.Key(t)
	c := newSemaphore(t, newRDB(t, srv.Addr), 3)
	a, err := c.TryLock(ctx, key, dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.TryLock(ctx, key, dlock.WithTTL(20*time.Second), dlock.WithMetadata("b"))
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Inspect(ctx, key)
	if err != nil || !info.Held || info.Holders != 2 || info.Limit != 3 || info.Owner != b.Owner() ||
		info.Token != b.Token() || info.Metadata != "b" || info.TTL <= 10*time.Second || info.LastToken != b.Token() {
		t.Fatalf("Inspect: %+v, %v", info, err)
	}
	infos, err := c.List(ctx, key)
	if err != nil || len(infos) != 1 || infos[0].Holders != 2 {
		t.Fatalf("List: %+v, %v", infos, err)
	}
	if _, err := c.ForceUnlock(ctx, key); err != nil {
		t.Fatal(err)
	}
	for _, l := range []*dlock.Lease{a, b} {
		if err := l.Extend(ctx, time.Second); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("Extend after ForceUnlock: %v", err)
		}
	}
	if info, err := c.Inspect(ctx, key); err != nil || info.Held {
		t.Fatalf("Inspect after ForceUnlock: %+v, %v", info, err)
	}
}

// TestClusterSemaphoreAndRWMutex: both primitives on a three-master cluster
// (every script single-slot, waiters woken through sharded pub/sub).
func TestClusterSemaphoreAndRWMutex(t *testing.T) {
	cluster := testserver.StartCluster(t, 3)
	newCC := func(t testing.TB) *redis.ClusterClient {
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = rdb.Close() })
		return rdb
	}
	t.Run("SemaphoreOfOne", func(t *testing.T) {
		dlocktest.Run(t, dlocktest.Backend{Info: driver.DriverInfo{Backend: "redislock", Kind: driver.KindSemaphore}, New: func(t testing.TB, opts ...dlock.Option) dlock.Locker {
			return newSemaphore(t, newCC(t), 1, opts...)
		}})
	})
	t.Run("Write", func(t *testing.T) {
		dlocktest.Run(t, dlocktest.Backend{Info: driver.DriverInfo{Backend: "redislock", Kind: driver.KindWrite}, New: func(t testing.TB, opts ...dlock.Option) dlock.Locker {
			return newRWMutex(t, newCC(t), opts...)
		}})
	})
	t.Run("SemaphoreNeverMoreThanN", func(t *testing.T) {
		var in atomic.Int32
		contend(t, func() dlock.Locker { return newSemaphore(t, newCC(t), 2) }, dlocktest.Key(t), 3, 2, 5,
			func(*dlock.Lease) (func(), error) {
				if v := in.Add(1); v > 2 {
					return nil, fmt.Errorf("%d holders of 2 permits", v)
				}
				return func() { in.Add(-1) }, nil
			})
	})
	t.Run("ReadersAndWriters", func(t *testing.T) {
		readersAndWriters(t, func() *redislock.RWMutex { return newRWMutex(t, newCC(t)) })
	})
}

// TestInspectorReadsEveryKind: one Inspector shows and forces mutexes,
// semaphores and read-write locks alike.
func TestInspectorReadsEveryKind(t *testing.T) {
	ctx := context.Background()
	rdb := newRDB(t, srv.Addr)
	base := dlocktest.Key(t)
	in, err := redislock.NewInspector(rdb)
	if err != nil {
		t.Fatal(err)
	}
	mu, err := newClient(t).TryLock(ctx, base+".mutex", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	sem := newSemaphore(t, rdb, 3)
	for i := 0; i < 2; i++ {
		if _, err := sem.TryLock(ctx, base+".sem", dlock.WithTTL(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	rl := newRWMutex(t, rdb).RLocker()
	for i := 0; i < 3; i++ {
		if _, err := rl.TryLock(ctx, base+".rw", dlock.WithTTL(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	infos, err := driver.List(ctx, in, base+".*")
	if err != nil || len(infos) != 3 {
		t.Fatalf("List: %+v, %v", infos, err)
	}
	want := map[string][2]int{base + ".mutex": {1, 1}, base + ".rw": {3, 0}, base + ".sem": {2, 3}}
	for _, info := range infos {
		if w := want[info.Key]; info.Holders != w[0] || info.Limit != w[1] {
			t.Errorf("%s: %d holders, limit %d; want %v", info.Key, info.Holders, info.Limit, w)
		}
	}
	if info, err := in.Inspect(ctx, base+".sem"); err != nil || info.Holders != 2 {
		t.Errorf("Inspect of a semaphore: %+v, %v", info, err)
	}
	for _, k := range []string{".mutex", ".sem", ".rw"} {
		if _, err := in.ForceUnlock(ctx, base+k); err != nil {
			t.Errorf("ForceUnlock(%s): %v", k, err)
		}
	}
	if err := mu.Extend(ctx, time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("mutex after ForceUnlock: %v", err)
	}
	if infos, err := driver.List(ctx, in, base+".*"); err != nil || len(infos) != 0 {
		t.Errorf("List after ForceUnlock: %+v, %v", infos, err)
	}
	occupyHash(t, rdb, base+".foreign")
	if _, err := in.Inspect(ctx, base+".foreign"); !errors.Is(err, dlock.ErrConflict) {
		t.Errorf("Inspect of a foreign hash: %v", err)
	}
	var nilIn *redislock.Inspector
	if _, err := driver.List(ctx, nilIn, "*"); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("nil Inspector: %v", err)
	}
}
