package redislock_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testproxy"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// pushBound is how soon a pushed loss must close a lease's Done: far below
// the renewal interval of dlocktest.PushedTTL (10 s).
const pushBound = 2 * time.Second

// lossSubscribed waits until n Clients of the server behind admin listen for
// pushed losses on dlock:lost, and, with patterns, until that many keyspace
// patterns are subscribed too.
func lossSubscribed(t testing.TB, ctx context.Context, admin *redis.Client, n int, patterns ...int) {
	t.Helper()
	for range 400 {
		subs, _ := admin.PubSubNumSub(ctx, "dlock:lost").Result()
		pats, _ := admin.PubSubNumPat(ctx).Result()
		if subs["dlock:lost"] >= int64(n) && (len(patterns) == 0 || pats >= int64(patterns[0])) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no loss subscription on the server")
}

// forcer is a dlocktest.PushedLoss removal by the Inspector of the server
// behind admin.
func forcer(t testing.TB, admin *redis.Client, n int) func(context.Context, *dlock.Lease) (time.Time, error) {
	in, err := redislock.NewInspector(admin)
	if err != nil {
		t.Fatal(err)
	}
	return func(ctx context.Context, l *dlock.Lease) (time.Time, error) {
		lossSubscribed(t, ctx, admin, n)
		start := time.Now()
		_, err := in.ForceUnlock(ctx, l.Key())
		return start, err
	}
}

func TestForceUnlockTellsHolderAtOnce(t *testing.T) {
	own := testserver.StartRedis(t)
	admin := newRDB(t, own.Addr)
	rdb := newRDB(t, own.Addr)
	rw, err := redislock.NewRWMutex(rdb)
	if err != nil {
		t.Fatal(err)
	}
	kinds := []struct {
		name string
		new  func() (dlock.Locker, error)
	}{
		{"plain", func() (dlock.Locker, error) { return redislock.New(rdb) }},
		{"fair", func() (dlock.Locker, error) { return redislock.NewFair(rdb) }},
		{"reentrant", func() (dlock.Locker, error) { return redislock.NewReentrant(rdb) }},
		{"semaphore", func() (dlock.Locker, error) { return redislock.NewSemaphore(rdb, 3) }},
		{"write", func() (dlock.Locker, error) { return rw.Client, nil }},
		{"read", func() (dlock.Locker, error) { return rw.RLocker(), nil }},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			c, err := k.new()
			if err != nil {
				t.Fatal(err)
			}
			took := dlocktest.PushedLoss(t, c, dlocktest.Key(t), pushBound, forcer(t, admin, 1))
			t.Logf("ForceUnlock to Done: %v", took)
		})
	}
}

func TestKeyspaceDeletionTellsHolderAtOnce(t *testing.T) {
	own := testserver.StartRedis(t, "--notify-keyspace-events", "Kgxe")
	admin := newRDB(t, own.Addr)
	c, err := redislock.New(newRDB(t, own.Addr))
	if err != nil {
		t.Fatal(err)
	}
	took := dlocktest.PushedLoss(t, c, dlocktest.Key(t), pushBound, func(ctx context.Context, l *dlock.Lease) (time.Time, error) {
		lossSubscribed(t, ctx, admin, 1, 1)
		start := time.Now()
		return start, admin.Del(ctx, redislock.LockKey(l.Key())).Err()
	})
	t.Logf("DEL by another client to Done: %v", took)
}

// TestLossPushWithoutKeyspacePermission: an ACL that allows dlock's channels
// but not the keyspace notifications' refuses the keyspace pattern; the
// Client subscribes to dlock:lost alone, and a force-unlock still reaches the
// holder at once.
func TestLossPushWithoutKeyspacePermission(t *testing.T) {
	own := testserver.StartRedis(t)
	admin := newRDB(t, own.Addr)
	ctx := context.Background()
	if err := admin.Do(ctx, "ACL", "SETUSER", "locker", "on", ">secret", "~*", "resetchannels", "&dlock:*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	rdb := testserver.RedisClient(t, own.Addr, func(o *redis.Options) { o.Username, o.Password = "locker", "secret" })
	c, err := redislock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	took := dlocktest.PushedLoss(t, c, dlocktest.Key(t), pushBound, forcer(t, admin, 1))
	t.Logf("ForceUnlock to Done: %v", took)
}

// TestLossWatchForgetsEndedLeases: the hub stops watching a holding however
// its lease ended: unlocked, force-unlocked (pushed), found gone by a renewal,
// past its deadline, or its acquisition cancelled.
func TestLossWatchForgetsEndedLeases(t *testing.T) {
	own := testserver.StartRedis(t)
	admin := newRDB(t, own.Addr)
	d, err := redislock.NewDriver(newRDB(t, own.Addr))
	if err != nil {
		t.Fatal(err)
	}
	c, err := dlock.NewClient(d)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	key := dlocktest.Key(t)
	take := func(opts ...dlock.Option) *dlock.Lease {
		t.Helper()
		l, err := c.TryLock(ctx, key, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if n := redislock.WatchedHoldings(d); n != 1 {
			t.Fatalf("%d holdings watched while one is held", n)
		}
		return l
	}
	forgotten := func(what string) {
		t.Helper()
		if n := redislock.WatchedHoldings(d); n != 0 {
			t.Errorf("%s: %d holdings still watched", what, n)
		}
	}
	l := take()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	forgotten("unlocked")

	l = take()
	lossSubscribed(t, ctx, admin, 1)
	in, _ := redislock.NewInspector(admin)
	if _, err := in.ForceUnlock(ctx, key); err != nil {
		t.Fatal(err)
	}
	<-l.Done()
	forgotten("force-unlocked, not unlocked yet")
	_ = l.Unlock(ctx)

	l = take(dlock.WithTTL(time.Second), dlock.WithRenewEvery(20*time.Millisecond))
	if err := admin.Del(ctx, redislock.LockKey(key)).Err(); err != nil { // nobody is told
		t.Fatal(err)
	}
	<-l.Done()
	if cause := context.Cause(l.Context()); !errors.Is(cause, dlock.ErrLockLost) {
		t.Fatalf("after a silent delete: %v", cause)
	}
	forgotten("found gone by a renewal")

	l = take(dlock.WithTTL(50*time.Millisecond), dlock.WithAutoRenew(false))
	<-l.Done()
	forgotten("past its deadline")

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.Lock(cctx, key); !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock with a cancelled context: %v", err)
	}
	forgotten("acquisition cancelled")
}

// TestForceBetweenGrantAndRegistrationIsTold: a force-unlock whose message
// reaches the Client after the server granted the lock and before the grant's
// reply did (so before the holding was registered) is not lost: the holding is
// checked when it registers.
func TestForceBetweenGrantAndRegistrationIsTold(t *testing.T) {
	own := testserver.StartRedis(t)
	admin := newRDB(t, own.Addr)
	slow := testproxy.Start(t, own.Addr)
	var direct atomic.Bool
	rdb := testserver.RedisClient(t, own.Addr, func(o *redis.Options) {
		// Commands go through the proxy, on one pooled connection; the loss
		// subscription, dialled while direct is set, does not.
		o.PoolSize, o.MinIdleConns = 1, 0
		o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if !direct.Load() {
				addr = slow.Addr
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}
	})
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for _, k := range []struct {
		name string
		new  func() (dlock.Locker, error)
	}{
		{"plain", func() (dlock.Locker, error) { return redislock.New(rdb) }},
		{"fair", func() (dlock.Locker, error) { return redislock.NewFair(rdb) }},
	} {
		t.Run(k.name, func(t *testing.T) {
			c, err := k.new()
			if err != nil {
				t.Fatal(err)
			}
			direct.Store(true)
			testserver.OpenLossWatch(t, own.Addr, func(ctx context.Context) error {
				l, err := c.TryLock(ctx, dlocktest.Key(t)+"-warm")
				if err != nil {
					return err
				}
				return l.Unlock(ctx)
			})
			direct.Store(false)
			key := dlocktest.Key(t)
			const delay = 300 * time.Millisecond
			slow.SetLatency(testproxy.Downstream, delay)
			type result struct {
				l   *dlock.Lease
				err error
			}
			got := make(chan result, 1)
			go func() {
				l, err := c.TryLock(ctx, key, dlock.WithTTL(dlocktest.PushedTTL))
				got <- result{l, err}
			}()
			// Granted by the server, its reply on its way: force it.
			in, err := redislock.NewInspector(admin)
			if err != nil {
				t.Fatal(err)
			}
			testserver.Eventually(t, 5*time.Second, "the grant", func() bool {
				info, err := in.Inspect(ctx, key)
				return err == nil && info.Held
			})
			if _, err := in.ForceUnlock(ctx, key); err != nil {
				t.Fatal(err)
			}
			forced := time.Now()
			r := <-got
			slow.SetLatency(testproxy.Downstream, 0)
			if r.err != nil {
				t.Fatal(r.err)
			}
			if time.Since(forced) < delay/2 {
				t.Fatalf("the reply came %v after the force: not delayed past it", time.Since(forced))
			}
			select {
			case <-r.l.Done():
				t.Logf("force to Done: %v", time.Since(forced))
			case <-time.After(pushBound):
				t.Fatalf("a holding forced before its registration was not told within %v", pushBound)
			}
		})
	}
}

// TestNewHoldingEndsTheSubscriptionsBackoff: after the server was out of
// reach long enough for the loss subscription's retries to back off to a
// second, a holding granted once it answers again brings the subscription
// back at once: a force-unlock right after that grant is told within
// tellBound, not when the backoff runs out (a Sentinel failover left a
// holder untold for more than TTL/6 so).
func TestNewHoldingEndsTheSubscriptionsBackoff(t *testing.T) {
	const down, tellBound = 2500 * time.Millisecond, 100 * time.Millisecond
	own := testserver.StartRedis(t)
	admin := newRDB(t, own.Addr)
	px := testproxy.Start(t, own.Addr)
	c, err := redislock.New(testserver.RedisClient(t, px.Addr, func(o *redis.Options) {
		o.DialTimeout, o.DialerRetries, o.MaxRetries = 200*time.Millisecond, 1, 0
	}))
	if err != nil {
		t.Fatal(err)
	}
	in, err := redislock.NewInspector(admin)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// A holding keeps the subscription open through the outage.
	keep, err := c.TryLock(ctx, dlocktest.Key(t)+"-keep", dlock.WithTTL(30*time.Second), dlock.WithAutoRenew(false))
	if err != nil {
		t.Fatal(err)
	}
	lossSubscribed(t, ctx, admin, 1)
	px.SetDown(true)
	time.Sleep(down) // the outage: the subscription's retries back off meanwhile
	px.SetDown(false)
	l, err := c.TryLock(ctx, dlocktest.Key(t), dlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatalf("TryLock once the server answers again: %v", err)
	}
	start := time.Now()
	if _, err := in.ForceUnlock(ctx, l.Key()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
		t.Logf("ForceUnlock to Done: %v", time.Since(start))
	case <-time.After(tellBound):
		t.Fatalf("a holding granted after the outage was not told of its force-unlock within %v", tellBound)
	}
	if !errors.Is(l.Err(), dlock.ErrLockLost) {
		t.Fatalf("Err %v, want ErrLockLost", l.Err())
	}
	_ = keep.Unlock(ctx)
}
