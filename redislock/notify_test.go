package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
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

// counter is a go-redis hook counting the commands a client sends, but for the
// set-up of new connections; the subscription connection's commands do not pass
// hooks.
type counter struct{ n atomic.Int64 }

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		switch name := cmd.Name(); {
		case name == "hello" || name == "client": // connection set-up
		case name == "evalsha" && isNoScript(err): // counted with its EVAL fallback
		default:
			c.n.Add(1)
		}
		return err
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if name := cmd.Name(); name != "hello" && name != "client" {
				c.n.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

func isNoScript(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") }

// counted returns a Client (fair or plain) on its own connection pool and the
// counter of its commands.
func counted(t testing.TB, fair bool, opts ...dlock.Option) (*redislock.Client, *counter) {
	rdb := newRDB(t, srv.Addr)
	cnt := &counter{}
	rdb.AddHook(cnt)
	newc := redislock.New
	if fair {
		newc = redislock.NewFair
	}
	c, err := newc(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c, cnt
}

// eventually polls cond until it holds or 10s have passed.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testserver.Eventually(t, 10*time.Second, what, cond)
}

// quiet waits until n has not changed for 100ms (at most 10s): the waiters'
// start-up attempts are over.
// openLossWatch takes and releases a lock of key through c, so that c's loss
// subscription, which lingers, is open (and its first check of the holdings
// done) before a test counts commands.
func openLossWatch(t testing.TB, ctx context.Context, c dlock.Locker, key string) {
	t.Helper()
	l, err := c.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// lossWatchers waits until n connections are subscribed to the loss channel.
func lossWatchers(t testing.TB, ctx context.Context, probe *redis.Client, n int64) {
	t.Helper()
	ch := redislock.Prefix + "lost"
	eventually(t, "loss subscriptions", func() bool { return probe.PubSubNumSub(ctx, ch).Val()[ch] >= n })
}

func quiet(t testing.TB, n func() int64) {
	t.Helper()
	last, since := n(), time.Now()
	for end := time.Now().Add(10 * time.Second); time.Since(since) < 100*time.Millisecond; {
		if time.Now().After(end) {
			t.Fatal("commands did not settle in 10s")
		}
		time.Sleep(10 * time.Millisecond)
		if v := n(); v != last {
			last, since = v, time.Now()
		}
	}
}

// numSub counts the subscriptions to the lock's wake channels: the lock's own
// (fair waiters) and each Client's (plain waiters).
func numSub(rdb *redis.Client, key string) int64 {
	ctx := context.Background()
	m := rdb.PubSubNumSub(ctx, redislock.WakeChannel(key)).Val()
	n := m[redislock.WakeChannel(key)]
	for _, ch := range rdb.PubSubChannels(ctx, redislock.WakeChannel(key)+":*").Val() {
		n += rdb.PubSubNumSub(ctx, ch).Val()[ch]
	}
	return n
}

// held takes a fresh key for ttl through a new Client (fair or plain), and
// returns a context bounding the test, the key and the holder's lease.
func held(t *testing.T, fair bool, ttl time.Duration) (context.Context, string, *dlock.Lease) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	key := dlocktest.Key(t)
	holder, _ := counted(t, fair)
	hl, err := holder.TryLock(ctx, key, dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	return ctx, key, hl
}

func bothKinds(t *testing.T, f func(t *testing.T, fair bool)) {
	t.Run("plain", func(t *testing.T) { f(t, false) })
	t.Run("fair", func(t *testing.T) { f(t, true) })
}

func TestFairConformance(t *testing.T) {
	dlocktest.Run(t, dlocktest.Backend{
		Info: driver.DriverInfo{Backend: "redislock", Kind: driver.KindFair},
		New: func(t testing.TB, opts ...dlock.Option) dlock.Locker {
			c, _ := counted(t, true, opts...)
			return c
		},
	})
}

// TestUncontendedIsTwoCommands: TryLock or Lock plus Unlock of a free lock is one
// script each, with no subscription.
func TestUncontendedIsTwoCommands(t *testing.T) {
	bothKinds(t, func(t *testing.T, fair bool) {
		c, cnt := counted(t, fair, dlock.WithTTL(10*time.Second))
		ctx := context.Background()
		key := dlocktest.Key(t)
		// The Client's loss subscription, opened by its first lock, checks
		// the holdings once the server confirms it: on a loaded host, that
		// came while a later lock of the loop was held, and was counted.
		openLossWatch(t, ctx, c, key)
		eventually(t, "the loss subscription confirmed", func() bool { return redislock.LossWatchConfirmed(c) })
		quiet(t, cnt.n.Load)
		for i := 0; i < 5; i++ {
			for _, f := range []func(context.Context, string, ...dlock.Option) (*dlock.Lease, error){c.TryLock, c.Lock} {
				before := cnt.n.Load()
				l, err := f(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				if err := l.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
				if n := cnt.n.Load() - before; n != 2 {
					t.Fatalf("lock+unlock took %d commands, want 2", n)
				}
			}
		}
		if n := numSub(newRDB(t, srv.Addr), key); n != 0 {
			t.Fatalf("%d subscribers to an uncontended lock", n)
		}
	})
}

// TestWaitersWakeOnReleaseWithoutPolling: waiters on a lock held for a minute make
// no command while they wait (polling at the default backoff would make several
// a second), and all get the lock one after another as soon as it is released.
func TestWaitersWakeOnReleaseWithoutPolling(t *testing.T) {
	bothKinds(t, func(t *testing.T, fair bool) {
		const clients, perClient = 2, 3
		ctx, key, hl := held(t, fair, time.Minute)
		probe := newRDB(t, srv.Addr)
		var cnts []*counter
		var got atomic.Int32
		g, gctx := errgroup.WithContext(ctx)
		for i := 0; i < clients; i++ {
			c, cnt := counted(t, fair)
			cnts = append(cnts, cnt)
			for j := 0; j < perClient; j++ {
				g.Go(func() error {
					l, err := c.Lock(gctx, key, dlock.WithTTL(time.Minute))
					if err != nil {
						return err
					}
					got.Add(1)
					return l.Unlock(gctx)
				})
			}
		}
		total := func() (n int64) {
			for _, c := range cnts {
				n += c.n.Load()
			}
			return n
		}
		eventually(t, "every client subscribed", func() bool { return numSub(probe, key) == clients })
		// Each waiter makes its first attempt (or queues behind its client's other
		// waiters) and one after the subscription is confirmed; then nothing until
		// the release.
		quiet(t, total)
		waitCmds := total()
		if waitCmds > 2*clients*perClient {
			t.Fatalf("waiters sent %d commands before waiting", waitCmds)
		}
		time.Sleep(time.Second) // the window in which a polling waiter would poll
		// A fair waiter refreshes its queue entry every FairWaiterTTL/5 (1s); a
		// plain one sends nothing. The default backoff would poll about 8 times.
		allowed := int64(0)
		if fair {
			allowed = 2 * clients * perClient
		}
		if n := total() - waitCmds; n > allowed {
			t.Fatalf("waiters sent %d commands in one second while the lock was held", n)
		}
		waitCmds = total()
		if err := hl.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
		after := total() - waitCmds
		t.Logf("%d commands while waiting, %d for %d hand-overs", waitCmds, after, clients*perClient)
		// Each waiter: its acquisition, its release, and failed attempts bounded by
		// the number of releases times the number of clients woken by each.
		if limit := int64(2*clients*perClient + (clients*perClient+1)*clients); after > limit {
			t.Fatalf("%d commands for %d hand-overs, more than %d", after, clients*perClient, limit)
		}
		eventually(t, "channel unsubscribed", func() bool { return numSub(probe, key) == 0 })
	})
}

// TestDeadHolderWaitersProceedAfterTTL: a holder that never unlocks (a crashed
// process) delays its waiters until its TTL and not much longer: they sleep
// until the remaining TTL the failed attempt reported, not on a backoff.
func TestDeadHolderWaitersProceedAfterTTL(t *testing.T) {
	bothKinds(t, func(t *testing.T, fair bool) {
		const ttl = 1500 * time.Millisecond
		ctx, key, hl := held(t, fair, ttl)
		expiry := time.Now().Add(ttl)
		waiter, cnt := counted(t, fair)
		l, err := waiter.Lock(ctx, key, dlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		late := time.Since(expiry)
		defer l.Unlock(ctx)
		<-hl.Done()
		if late > 400*time.Millisecond {
			t.Errorf("waiter got the lock %v after the holder's TTL", late)
		}
		// first attempt, one after subscribing, (fair: one refresh a second), the winning one
		if n := cnt.n.Load(); n > 5 {
			t.Errorf("waiter made %d attempts", n)
		}
		t.Logf("acquired %v after the holder's expiry with %d commands", late, cnt.n.Load())
	})
}

// TestCancelledWaiterLeavesNothing: a fair waiter whose context ends leaves the
// queue at once, and a plain one leaves no subscription.
func TestCancelledWaiterLeavesNothing(t *testing.T) {
	bothKinds(t, func(t *testing.T, fair bool) {
		ctx, key, hl := held(t, fair, time.Minute)
		probe := newRDB(t, srv.Addr)
		defer hl.Unlock(ctx)
		waiter, _ := counted(t, fair)
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := waiter.Lock(wctx, key)
			done <- err
		}()
		eventually(t, "waiter subscribed", func() bool { return numSub(probe, key) == 1 })
		if fair {
			eventually(t, "waiter queued", func() bool { return probe.LLen(ctx, redislock.QueueKey(key)).Val() == 1 })
			if info, err := waiter.Inspect(ctx, key); err != nil || !info.Held || info.Waiters != 1 {
				t.Errorf("Inspect with one queued waiter: %+v, %v", info, err)
			}
		}
		cancel()
		if err := <-done; !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Lock: %v", err)
		}
		for _, k := range []string{redislock.QueueKey(key), redislock.QueueDeadlineKey(key)} {
			if n := probe.Exists(ctx, k).Val(); n != 0 {
				t.Errorf("%s left behind: %v", k, probe.Do(ctx, "DUMP", k).Val())
			}
		}
		if left := probe.Keys(ctx, redislock.QueueEntryKey(key, "*")).Val(); len(left) != 0 {
			t.Errorf("queue entries left behind: %v", left)
		}
		eventually(t, "channel unsubscribed", func() bool { return numSub(probe, key) == 0 })
		if info, err := waiter.Inspect(ctx, key); err != nil || info.Waiters != 0 {
			t.Errorf("Inspect after the waiter left: %+v, %v", info, err)
		}
	})
}

// TestFairGrantsInArrivalOrder: waiters on several connections get the lock in
// the order they queued, whatever their connection.
func TestFairGrantsInArrivalOrder(t *testing.T) {
	const clients, waiters = 3, 7
	ctx, key, hl := held(t, true, time.Minute)
	probe := newRDB(t, srv.Addr)
	var cs []*redislock.Client
	for i := 0; i < clients; i++ {
		c, _ := counted(t, true)
		cs = append(cs, c)
	}
	var mu sync.Mutex
	var order []int
	g, gctx := errgroup.WithContext(ctx)
	for i := 0; i < waiters; i++ {
		g.Go(func() error {
			l, err := cs[(i*2)%clients].Lock(gctx, key, dlock.WithTTL(time.Minute))
			if err != nil {
				return err
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			return l.Unlock(gctx)
		})
		eventually(t, fmt.Sprintf("waiter %d queued", i), func() bool {
			return probe.LLen(ctx, redislock.QueueKey(key)).Val() == int64(i+1)
		})
	}
	// A newcomer's TryLock does not barge, and Lock queues at the end.
	if _, err := cs[0].TryLock(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock with a queue: %v", err)
	}
	if err := hl.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	for i, w := range order {
		if w != i {
			t.Fatalf("grant order %v, want arrival order", order)
		}
	}
	if n := probe.Exists(ctx, redislock.QueueKey(key), redislock.QueueDeadlineKey(key)).Val(); n != 0 {
		t.Fatalf("%d queue keys left", n)
	}
	// The lock record stays, released, until the last holding's TTL runs out.
	if r, ok := redislock.ParseRecord(probe.Get(ctx, redislock.LockKey(key)).Val()); !ok || r.Owner != "" || r.Waited {
		t.Fatalf("lock record left: %+v (ok %v), want a released one", r, ok)
	}
}

// TestFairDeadWaiterIsDropped: a queued waiter that stops refreshing its entry
// (its process died) is dropped after FairWaiterTTL, and the lock goes to the
// next waiter; a lock handed to a dead head moves on after the same time.
func TestFairDeadWaiterIsDropped(t *testing.T) {
	if testing.Short() {
		t.Skip("waits FairWaiterTTL")
	}
	ctx, key, hl := held(t, true, time.Minute)
	probe := newRDB(t, srv.Addr)
	// A dead waiter: its entry (its Client's 16-character id, then its owner) is
	// queued first and never refreshed.
	dead := "0123456789abcdef0123456789abcdef"
	probe.RPush(ctx, redislock.QueueKey(key), dead)
	probe.Set(ctx, redislock.QueueEntryKey(key, dead), "1", redislock.FairWaiterTTL)
	waiter, _ := counted(t, true)
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		l, err := waiter.Lock(ctx, key)
		if err == nil {
			err = l.Unlock(ctx)
		}
		done <- err
	}()
	eventually(t, "waiter queued", func() bool { return probe.LLen(ctx, redislock.QueueKey(key)).Val() == 2 })
	if err := hl.Unlock(ctx); err != nil { // handed to the dead head
		t.Fatal(err)
	}
	if r, _ := redislock.ParseRecord(probe.Get(ctx, redislock.LockKey(key)).Val()); r.Owner != dead[16:] {
		t.Fatalf("lock handed to %q, want the head of the queue", r.Owner)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > redislock.FairWaiterTTL+2*time.Second {
		t.Fatalf("waiter behind a dead one waited %v", el)
	}
}

// TestSubscriptionKillDoesNotStrandWaiters: after CLIENT KILL of the
// subscription connection the Client subscribes again, and its waiters get the
// lock on the next release, whether it comes after the new subscription or while
// the connection is down (the message is lost; the new subscription's
// confirmation wakes them).
func TestSubscriptionKillDoesNotStrandWaiters(t *testing.T) {
	bothKinds(t, func(t *testing.T, fair bool) {
		for _, resubscribed := range []bool{true, false} {
			ctx, key, hl := held(t, fair, time.Minute)
			s := newRDB(t, srv.Addr)
			waiter, _ := counted(t, fair)
			g, gctx := errgroup.WithContext(ctx)
			for i := 0; i < 3; i++ {
				g.Go(func() error {
					l, err := waiter.Lock(gctx, key, dlock.WithTTL(time.Minute))
					if err != nil {
						return err
					}
					return l.Unlock(gctx)
				})
			}
			eventually(t, "waiters subscribed", func() bool { return numSub(s, key) == 1 })
			if n := s.ClientKillByFilter(ctx, "TYPE", "pubsub").Val(); n < 1 {
				t.Fatalf("killed %d pubsub connections", n)
			}
			if resubscribed {
				eventually(t, "subscribed again", func() bool { return numSub(s, key) == 1 })
			}
			if err := hl.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- g.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second): // far below the one-minute TTL
				t.Fatalf("waiters stranded after the subscription connection was killed (release after resubscribing: %v)", resubscribed)
			}
		}
	})
}

// TestOneSubscriptionConnectionForManyKeys: waiters on many keys of one Client
// share one subscription connection, and leave no channel behind.
func TestOneSubscriptionConnectionForManyKeys(t *testing.T) {
	const keys = 40
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := newRDB(t, srv.Addr)
	holder, _ := counted(t, false)
	name := dlocktest.Key(t)
	wrdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ClientName: "waiter-" + name[len(name)-12:]})
	t.Cleanup(func() { _ = wrdb.Close() })
	waiter, err := redislock.New(wrdb)
	if err != nil {
		t.Fatal(err)
	}
	var leases []*dlock.Lease
	g, gctx := errgroup.WithContext(ctx)
	for i := 0; i < keys; i++ {
		key := fmt.Sprintf("%s.%d", name, i)
		l, err := holder.TryLock(ctx, key, dlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
		g.Go(func() error {
			l, err := waiter.Lock(gctx, key)
			if err != nil {
				return err
			}
			return l.Unlock(gctx)
		})
	}
	pattern := redislock.Prefix + "{" + name + ".*"
	eventually(t, "all keys subscribed", func() bool { return len(s.PubSubChannels(ctx, pattern).Val()) == keys })
	subConns := 0
	for _, line := range strings.Split(s.ClientList(ctx).Val(), "\n") {
		if strings.Contains(line, " name=waiter-"+name[len(name)-12:]+" ") && !strings.Contains(line, " sub=0 ") {
			subConns++
		}
	}
	if subConns != 1 {
		t.Errorf("%d subscription connections for %d keys, want 1", subConns, keys)
	}
	for _, l := range leases {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "all channels unsubscribed", func() bool { return len(s.PubSubChannels(ctx, pattern).Val()) == 0 })
}

// TestPlainLockDoesNotStarveWaiters: with default settings, goroutines of one
// Client contending for one key each wait at most a bounded number of critical
// sections (local waiters are woken in order and newcomers queue behind them).
func TestPlainLockDoesNotStarveWaiters(t *testing.T) {
	const goroutines, rounds = 8, 10
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	key := dlocktest.Key(t)
	c, cnt := counted(t, false)
	var sections atomic.Int64
	var worst atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	for i := 0; i < goroutines; i++ {
		g.Go(func() error {
			for r := 0; r < rounds; r++ {
				before := sections.Load()
				l, err := c.Lock(gctx, key)
				if err != nil {
					return err
				}
				d := sections.Add(1) - before - 1
				for w := worst.Load(); d > w && !worst.CompareAndSwap(w, d); w = worst.Load() {
				}
				time.Sleep(time.Millisecond) // the critical section
				if err := l.Unlock(gctx); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	per := float64(cnt.n.Load()) / (goroutines * rounds)
	t.Logf("at most %d other critical sections during one wait; %.2f commands per critical section", worst.Load(), per)
	if w := worst.Load(); w > 2*goroutines {
		t.Errorf("a waiter waited through %d critical sections with %d goroutines", w, goroutines)
	}
	if per > 4 {
		t.Errorf("%.2f commands per critical section", per)
	}
}

// TestClusterNotifiedWaiting: through a *redis.ClusterClient, waiters subscribe
// with sharded pub/sub on the lock's shard and are woken by the release; the
// fair lock passes the conformance suite there (its four keys share a slot).
func TestClusterNotifiedWaiting(t *testing.T) {
	cluster := testserver.StartCluster(t, 3)
	newCC := func(t testing.TB) *redis.ClusterClient {
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = rdb.Close() })
		return rdb
	}
	t.Run("FairConformance", func(t *testing.T) {
		dlocktest.Run(t, dlocktest.Backend{
			Info: driver.DriverInfo{Backend: "redislock", Kind: driver.KindFair},
			New: func(t testing.TB, opts ...dlock.Option) dlock.Locker {
				c, err := redislock.NewFair(newCC(t), opts...)
				if err != nil {
					t.Fatal(err)
				}
				return c
			},
		})
	})
	bothKinds(t, func(t *testing.T, fair bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		newc := redislock.New
		if fair {
			newc = redislock.NewFair
		}
		holder, err := newc(newCC(t))
		if err != nil {
			t.Fatal(err)
		}
		wrdb, cnt := newCC(t), &counter{}
		wrdb.AddHook(cnt)
		waiter, err := newc(wrdb)
		if err != nil {
			t.Fatal(err)
		}
		key := dlocktest.Key(t)
		hl, err := holder.TryLock(ctx, key, dlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			l, err := waiter.Lock(ctx, key, dlock.WithTTL(time.Minute))
			if err == nil {
				err = l.Unlock(ctx)
			}
			done <- err
		}()
		ch := redislock.WakeChannel(key)
		node, err := newCC(t).MasterForKey(ctx, ch)
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, "sharded subscription on the lock's shard", func() bool {
			// the lock's channel (fair) or the Client's own for it (plain)
			v, err := node.Do(ctx, "PUBSUB", "SHARDCHANNELS", ch+"*").StringSlice()
			return err == nil && len(v) == 1
		})
		// the first attempt, and the one made once the subscription was confirmed
		eventually(t, "waiter's second attempt", func() bool { return cnt.n.Load() >= 2 })
		if err := hl.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second): // far below the one-minute TTL
			t.Fatal("waiter not woken by the release")
		}
	})
}

// TestReleaserDoesNotStarveOtherClient: a holder that unlocks and locks again at
// once, in a loop, does not keep a waiter of another Client out: each release
// wakes the waiter, which races the holder's next attempt.
func TestReleaserDoesNotStarveOtherClient(t *testing.T) {
	ctx, key, l := held(t, false, time.Minute)
	a, _ := counted(t, false)
	b, cnt := counted(t, false)
	got := make(chan error, 1)
	go func() {
		lb, err := b.Lock(ctx, key, dlock.WithTTL(time.Minute))
		if err == nil {
			err = lb.Unlock(ctx)
		}
		got <- err
	}()
	eventually(t, "waiter subscribed", func() bool { return numSub(newRDB(t, srv.Addr), key) == 1 })
	quiet(t, cnt.n.Load)
	const limit = 50 // a fair coin loses 50 times in a row once in 10^15
	for rounds := 0; ; rounds++ {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("the waiter had got the lock by release %d", rounds+1)
			return
		default:
		}
		if rounds == limit {
			t.Fatalf("the waiter did not get the lock in %d releases", limit)
		}
		var err error
		if l, err = a.Lock(ctx, key, dlock.WithTTL(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRingWaitersPoll: a redis.Ring cannot share one subscription, so its
// waiters fall back on the retry strategy, and still get the lock.
func TestRingWaitersPoll(t *testing.T) {
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srv.Addr}})
	t.Cleanup(func() { _ = ring.Close() })
	c, err := redislock.New(ring, dlock.WithRetry(dlock.FixedBackoff(5*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, key, hl := held(t, false, time.Minute)
	done := make(chan error, 1)
	go func() {
		l, err := c.Lock(ctx, key)
		if err == nil {
			err = l.Unlock(ctx)
		}
		done <- err
	}()
	eventually(t, "waiter marked the holding", func() bool {
		return waitedFor(ctx, newRDB(t, srv.Addr), key)
	})
	if err := hl.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestGoneWaiterLeavesNoResidue: a waiter whose client goes away (as when its
// process dies) leaves nothing behind but, on a plain lock, the mark on the
// current holding, which goes with it; on a fair lock, its queue entry (and the
// lock, if handed to it) for at most FairWaiterTTL.
func TestGoneWaiterLeavesNoResidue(t *testing.T) {
	bothKinds(t, func(t *testing.T, fair bool) {
		ctx, key, hl := held(t, fair, time.Minute)
		probe := newRDB(t, srv.Addr)
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		newc := redislock.New
		if fair {
			newc = redislock.NewFair
		}
		waiter, err := newc(rdb)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			// A second of failures only (its client closed) ends the wait.
			_, err := waiter.Lock(ctx, key, dlock.WithFailureLimit(time.Second))
			done <- err
		}()
		eventually(t, "waiter subscribed", func() bool { return numSub(probe, key) == 1 })
		if err := rdb.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; !errors.Is(err, dlock.ErrUnavailable) {
			t.Fatalf("Lock after its client was closed: %v", err)
		}
		eventually(t, "channel unsubscribed", func() bool { return numSub(probe, key) == 0 })
		if err := hl.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		for _, k := range probe.Keys(ctx, redislock.Prefix+"{"+key+"}*").Val() {
			if k == redislock.FenceKey(key) || k == redislock.LockKey(key) && releasedRecord(ctx, probe, key) {
				continue
			}
			if ttl := probe.PTTL(ctx, k).Val(); !fair || ttl <= 0 || ttl > redislock.FairWaiterTTL {
				t.Errorf("%s left after the release with PTTL %v", k, ttl)
			}
		}
	})
}

// TestFairCancelAtRandomLeavesNoQueueEntry: fair waiters cancelled at random
// points (before, during and after joining the queue) all leave it.
func TestFairCancelAtRandomLeavesNoQueueEntry(t *testing.T) {
	ctx, key, hl := held(t, true, time.Minute)
	defer hl.Unlock(ctx)
	probe := newRDB(t, srv.Addr)
	var cs []*redislock.Client
	for i := 0; i < 3; i++ {
		c, _ := counted(t, true)
		cs = append(cs, c)
	}
	g, gctx := errgroup.WithContext(ctx)
	for i := 0; i < 30; i++ {
		g.Go(func() error {
			wctx, cancel := context.WithTimeout(gctx, time.Duration(i%10)*300*time.Microsecond)
			defer cancel()
			if _, err := cs[i%3].Lock(wctx, key); !errors.Is(err, dlock.ErrNotObtained) {
				return fmt.Errorf("Lock of a held key: %v", err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if n := probe.Exists(ctx, redislock.QueueKey(key), redislock.QueueDeadlineKey(key)).Val(); n != 0 {
		t.Fatalf("queue left behind: %v", probe.LRange(ctx, redislock.QueueKey(key), 0, -1).Val())
	}
	if left := probe.Keys(ctx, redislock.QueueEntryKey(key, "*")).Val(); len(left) != 0 {
		t.Fatalf("queue entries left behind: %v", left)
	}
}

// TestOneReleaseWakesOneProcess: with one waiter in each of many processes
// (Clients), each release wakes one of them, not all: the commands for all the
// hand-overs grow with the number of waiters, not with its square.
func TestOneReleaseWakesOneProcess(t *testing.T) {
	const clients = 12
	ctx, key, hl := held(t, false, time.Minute)
	probe := newRDB(t, srv.Addr)
	var cnts []*counter
	var order []int
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	for i := 0; i < clients; i++ {
		c, cnt := counted(t, false)
		cnts = append(cnts, cnt)
		g.Go(func() error {
			l, err := c.Lock(gctx, key, dlock.WithTTL(time.Minute))
			if err != nil {
				return err
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			return l.Unlock(gctx)
		})
	}
	total := func() (n int64) {
		for _, c := range cnts {
			n += c.n.Load()
		}
		return n
	}
	eventually(t, "every client subscribed", func() bool { return numSub(probe, key) == clients })
	eventually(t, "every client waits in the set", func() bool {
		return probe.ZCard(ctx, redislock.WaitingKey(key)).Val() == clients
	})
	quiet(t, total)
	before := total()
	if err := hl.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	after := total() - before
	t.Logf("%d commands for %d hand-overs, order %v", after, clients, order)
	// Each waiter: one attempt and one release, plus a few lost races.
	if limit := int64(3 * clients); after > limit {
		t.Fatalf("%d commands for %d hand-overs, more than %d", after, clients, limit)
	}
	eventually(t, "the waiting set is gone", func() bool { return probe.Exists(ctx, redislock.WaitingKey(key)).Val() == 0 })
}

// TestServerCommandsPerCycle: an uncontended lock and unlock costs the server 9
// commands for the plain lock and 10 for the fair one, counting every call the
// scripts make (INFO commandstats on a server of the test's own).
func TestServerCommandsPerCycle(t *testing.T) {
	s, admin := startRedis(t)
	ctx := context.Background()
	calls := func() (n int64) {
		for _, line := range strings.Split(admin.Info(ctx, "commandstats").Val(), "\n") {
			if strings.HasPrefix(line, "cmdstat_info:") || strings.HasPrefix(line, "cmdstat_psubscribe:") || strings.HasPrefix(line, "cmdstat_subscribe:") ||
				strings.HasPrefix(line, "cmdstat_hello:") || strings.HasPrefix(line, "cmdstat_client|") {
				continue // bookkeeping, connections, and the loss subscription of a Client
			}
			if _, v, ok := strings.Cut(line, "calls="); ok {
				v, _, _ = strings.Cut(v, ",")
				c, _ := strconv.ParseInt(v, 10, 64)
				n += c
			}
		}
		return n
	}
	for _, fair := range []bool{false, true} {
		newc := redislock.New
		want := 9.0
		if fair {
			newc, want = redislock.NewFair, 10
		}
		c, err := newc(newRDB(t, s.Addr), dlock.WithTTL(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		key := dlocktest.Key(t)
		l, err := c.Lock(ctx, key) // loads the scripts
		if err != nil {
			t.Fatal(err)
		}
		_ = l.Unlock(ctx)
		const n = 50
		before := calls()
		for range n {
			l, err := c.Lock(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
		got := float64(calls()-before-1) / n // less the INFO of the count before
		t.Logf("fair %v: %.1f server commands per cycle", fair, got)
		if got > want {
			t.Errorf("fair %v: %.1f server commands per uncontended cycle, want %v", fair, got, want)
		}
	}
}

// TestWaiterThatLeavesGivesUpItsTurn: a process whose waiters all give up leaves
// the waiting set, so the next release wakes the process behind it at once.
func TestWaiterThatLeavesGivesUpItsTurn(t *testing.T) {
	ctx, key, hl := held(t, false, time.Minute)
	probe := newRDB(t, srv.Addr)
	a, _ := counted(t, false)
	b, _ := counted(t, false)
	actx, acancel := context.WithCancel(ctx)
	aDone := make(chan error, 1)
	go func() {
		_, err := a.Lock(actx, key)
		aDone <- err
	}()
	eventually(t, "A waits in the set", func() bool { return probe.ZCard(ctx, redislock.WaitingKey(key)).Val() == 1 })
	bDone := make(chan error, 1)
	go func() {
		l, err := b.Lock(ctx, key)
		if err == nil {
			err = l.Unlock(ctx)
		}
		bDone <- err
	}()
	eventually(t, "B waits in the set", func() bool { return probe.ZCard(ctx, redislock.WaitingKey(key)).Val() == 2 })
	acancel()
	if err := <-aDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("A: %v", err)
	}
	eventually(t, "A left the set", func() bool { return probe.ZCard(ctx, redislock.WaitingKey(key)).Val() == 1 })
	released := time.Now()
	if err := hl.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-bDone; err != nil {
		t.Fatalf("B: %v", err)
	}
	if d := time.Since(released); d > 5*time.Second {
		t.Errorf("B obtained the lock %v after the release (the holder's TTL was a minute)", d)
	}
}

// TestManyKeysManyClientsNoLostWake: Clients with waiters on several keys each
// (in one process and across Clients) never wait for a holder's TTL: every
// release wakes a waiter, local or remote.
func TestManyKeysManyClientsNoLostWake(t *testing.T) {
	const clients, keys, perKey, rounds = 3, 6, 2, 5
	ttl := 20 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs := make([]*redislock.Client, clients)
	for i := range cs {
		cs[i], _ = counted(t, false, dlock.WithTTL(ttl))
	}
	ks := make([]string, keys)
	for i := range ks {
		ks[i] = dlocktest.Key(t)
	}
	var worst atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	for _, c := range cs {
		for _, k := range ks {
			for range perKey {
				g.Go(func() error {
					for range rounds {
						start := time.Now()
						l, err := c.Lock(gctx, k)
						if err != nil {
							return err
						}
						if d := int64(time.Since(start)); d > worst.Load() {
							worst.Store(d)
						}
						time.Sleep(time.Millisecond)
						if err := l.Unlock(gctx); err != nil {
							return err
						}
					}
					return nil
				})
			}
		}
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	t.Logf("longest wait %v (TTL %v)", time.Duration(worst.Load()), ttl)
	if w := time.Duration(worst.Load()); w > ttl/4 {
		t.Errorf("a waiter waited %v: a lost wake-up (TTL %v)", w, ttl)
	}
}
