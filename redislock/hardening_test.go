package redislock_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testproxy"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"
)

type abandonDriver interface {
	driver.Driver
	driver.Abandoner
}

// TestAbandonStopsALateAttempt: an acquisition's clean-up that reaches the server
// before the attempt it cleans up (sent earlier on another connection) still
// leaves nothing behind: the late attempt neither takes the lock nor queues.
func TestAbandonStopsALateAttempt(t *testing.T) {
	bothKinds(t, func(t *testing.T, fair bool) {
		ctx := context.Background()
		rdb := newRDB(t, srv.Addr)
		var d abandonDriver
		var err error
		if fair {
			d, err = redislock.NewFairDriver(rdb)
		} else {
			d, err = redislock.NewDriver(rdb)
		}
		if err != nil {
			t.Fatal(err)
		}
		key := dlocktest.Key(t)
		h := driver.Holding{Key: key, Owner: "00112233445566778899aabbccddeeff", TTL: time.Minute}
		if err := d.Abandon(ctx, h); err != nil {
			t.Fatal(err)
		}
		for _, waiting := range []bool{false, true} {
			_, err := d.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: h.Owner, TTL: time.Minute, Waiting: waiting})
			if err == nil {
				t.Fatalf("a late attempt (waiting %v) of an abandoned acquisition took the lock", waiting)
			}
		}
		if n := rdb.Exists(ctx, redislock.LockKey(key), redislock.QueueKey(key)).Val(); n != 0 {
			t.Fatalf("%d lock or queue keys left by an abandoned acquisition", n)
		}
		// Another owner is not affected.
		c := newClient(t)
		if fair {
			c, _ = counted(t, true)
		}
		l, err := c.TryLock(ctx, key)
		if err != nil {
			t.Fatalf("TryLock by another owner: %v", err)
		}
		_ = l.Unlock(ctx)
		if ttl := rdb.PTTL(ctx, redislock.AbandonKey(key, h.Owner)).Val(); ttl <= 0 || ttl > max(h.TTL, redislock.AbandonMarkTTL) {
			t.Errorf("abandon mark PTTL %v, want in (0, %v]", ttl, max(h.TTL, redislock.AbandonMarkTTL))
		}
	})
}

// TestAcquireIsIdempotentForItsOwner: an attempt by the owner that already holds
// the lock (its earlier attempt's reply was lost) gets the same holding back.
func TestAcquireIsIdempotentForItsOwner(t *testing.T) {
	bothKinds(t, func(t *testing.T, fair bool) {
		ctx := context.Background()
		rdb := newRDB(t, srv.Addr)
		var d driver.Driver
		if fair {
			d, _ = redislock.NewFairDriver(rdb)
		} else {
			d, _ = redislock.NewDriver(rdb)
		}
		key := dlocktest.Key(t)
		r := driver.AcquireRequest{Key: key, Owner: "ffeeddccbbaa99887766554433221100", TTL: 500 * time.Millisecond}
		g1, err := d.Acquire(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		r.TTL = time.Minute
		g2, err := d.Acquire(ctx, r)
		if err != nil || g2.Token != g1.Token {
			t.Fatalf("second attempt of the holder: %+v, %v; want token %d", g2, err, g1.Token)
		}
		if ttl := rdb.PTTL(ctx, redislock.LockKey(key)).Val(); ttl < 30*time.Second {
			t.Errorf("PTTL %v after the retry, want the retry's TTL", ttl)
		}
		_ = d.Release(ctx, driver.Holding{Key: key, Owner: r.Owner})
	})
}

// TestCancellationStormLeavesNoLock: callers with deadlines of 0-5 ms on a few
// keys, each with its own Client, leave no lock and no queue entry behind: every
// key is free once the storm is over and each Unlock has returned.
func TestCancellationStormLeavesNoLock(t *testing.T) {
	bothKinds(t, func(t *testing.T, fair bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		keys := make([]string, 3)
		for i := range keys {
			keys[i] = dlocktest.Key(t)
		}
		clients := make([]*redislock.Client, 8)
		for i := range clients {
			clients[i], _ = counted(t, fair, dlock.WithTTL(time.Minute))
		}
		var g errgroup.Group
		var mu sync.Mutex
		got, failed := 0, 0
		for w := range 24 {
			g.Go(func() error {
				c := clients[w%len(clients)]
				for i := range 40 {
					d := time.Duration(rand.IntN(5000)) * time.Microsecond
					cctx, ccancel := context.WithTimeout(ctx, d)
					var l *dlock.Lease
					var err error
					if i%2 == 0 {
						l, err = c.Lock(cctx, keys[i%len(keys)])
					} else {
						l, err = c.TryLock(cctx, keys[i%len(keys)])
					}
					ccancel()
					mu.Lock()
					if err == nil {
						got++
					} else {
						failed++
					}
					mu.Unlock()
					if err == nil {
						if err := l.Unlock(ctx); err != nil {
							return err
						}
					} else if !errors.Is(err, dlock.ErrNotObtained) && !errors.Is(err, dlock.ErrUnavailable) {
						return err
					}
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
		probe := newRDB(t, srv.Addr)
		for _, k := range keys {
			n := probe.Exists(ctx, redislock.LockKey(k), redislock.QueueKey(k)).Val()
			if releasedRecord(ctx, probe, k) {
				n-- // the plain lock's last token, until the TTL of its last holding
			}
			if n != 0 {
				h := probe.HGetAll(ctx, redislock.LockKey(k)).Val()
				t.Errorf("key %s: %d lock/queue keys left after the storm (holder %v, PTTL %v)", k, n, h, probe.PTTL(ctx, redislock.LockKey(k)).Val())
			}
		}
		t.Logf("storm: %d obtained, %d failed", got, failed)
	})
}

// startRedis starts a server of the test's own, for faults that affect a whole
// server.
func startRedis(t *testing.T) (*testserver.Redis, *redis.Client) {
	s := testserver.StartRedis(t)
	return s, newRDB(t, s.Addr)
}

// TestWaitRidesOutTransientFailures: a waiting Lock retries failures that waiting
// can cure (a reply that came after the TTL because writes were paused, an
// out-of-memory refusal) until its wait ends, instead of giving up at the first.
func TestWaitRidesOutTransientFailures(t *testing.T) {
	t.Run("late reply", func(t *testing.T) {
		s, admin := startRedis(t)
		ctx := context.Background()
		c, err := redislock.New(newRDB(t, s.Addr), dlock.WithTTL(200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		key := dlocktest.Key(t)
		if err := admin.Do(ctx, "CLIENT", "PAUSE", "1000", "WRITE").Err(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		l, err := c.Lock(ctx, key, dlock.WithWait(10*time.Second))
		if err != nil {
			t.Fatalf("Lock across a 1s write pause: %v", err)
		}
		if el := time.Since(start); el < 800*time.Millisecond {
			t.Errorf("obtained after %v, before the pause ended", el)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("out of memory", func(t *testing.T) {
		s, admin := startRedis(t)
		ctx := context.Background()
		c, err := redislock.New(newRDB(t, s.Addr))
		if err != nil {
			t.Fatal(err)
		}
		key := dlocktest.Key(t)
		if err := admin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
			t.Fatal(err)
		}
		if err := admin.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
			t.Fatal(err)
		}
		_, err = c.TryLock(ctx, key)
		if !errors.Is(err, dlock.ErrUnavailable) || errors.Is(err, dlock.ErrRefused) || errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("TryLock when out of memory: %v, want ErrUnavailable only", err)
		}
		if !strings.Contains(err.Error(), "OOM") {
			t.Errorf("error %q does not name the server's reply", err)
		}
		// A wait that ends while memory is still short says so.
		_, err = c.Lock(ctx, key, dlock.WithWait(300*time.Millisecond))
		if !errors.Is(err, dlock.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("Lock whose wait ended out of memory: %v", err)
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("error on more than one line: %q", err)
		}
		// A wait during which memory comes back obtains the lock.
		ooms := func() int {
			for _, line := range strings.Split(admin.Info(ctx, "errorstats").Val(), "\n") {
				if v, ok := strings.CutPrefix(strings.TrimSpace(line), "errorstat_OOM:count="); ok {
					n, _ := strconv.Atoi(v)
					return n
				}
			}
			return 0
		}
		before := ooms()
		done := make(chan error, 1)
		go func() {
			l, err := c.Lock(ctx, key, dlock.WithWait(10*time.Second))
			if err == nil {
				err = l.Unlock(ctx)
			}
			done <- err
		}()
		eventually(t, "the waiter meets the refusal", func() bool { return ooms() > before })
		if err := admin.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("Lock across an out-of-memory spell: %v", err)
		}
	})
}

// TestPermissionRefusalIsTyped: a user whose ACL lacks EVALSHA/EVAL gets
// ErrRefused (which matches ErrUnavailable), and a waiting Lock fails at once.
func TestPermissionRefusalIsTyped(t *testing.T) {
	s, admin := startRedis(t)
	ctx := context.Background()
	if err := admin.Do(ctx, "ACL", "SETUSER", "noeval", "on", ">pw", "~*", "&*", "+@all", "-eval", "-evalsha").Err(); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, Username: "noeval", Password: "pw", ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := redislock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	key := dlocktest.Key(t)
	if _, err := c.TryLock(ctx, key); !errors.Is(err, dlock.ErrRefused) || !errors.Is(err, dlock.ErrUnavailable) || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("TryLock without EVALSHA permission: %v, want ErrRefused naming NOPERM", err)
	}
	start := time.Now()
	if _, err := c.Lock(ctx, key, dlock.WithWait(5*time.Second)); !errors.Is(err, dlock.ErrRefused) {
		t.Fatalf("Lock without permission: %v, want ErrRefused", err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("Lock took %v to report a refusal that waiting cannot cure", el)
	}
}

// logBuffer captures the default slog logger for a test.
func logBuffer(t *testing.T) *syncBuffer {
	b := &syncBuffer{}
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(b, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
	return b
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestNoChannelPermissionFallsBackToPolling: with an ACL user that has no pub/sub
// channels (Redis 7's default for new users), waiters cannot be woken: the
// refused subscription and the refused wake-up are logged, and waiters poll,
// obtaining a released lock long before the holder's TTL.
func TestNoChannelPermissionFallsBackToPolling(t *testing.T) {
	logs := logBuffer(t)
	s, admin := startRedis(t)
	ctx := context.Background()
	if err := admin.Do(ctx, "ACL", "SETUSER", "app", "on", ">pw", "~*", "resetchannels", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	newApp := func() *redislock.Client {
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr, Username: "app", Password: "pw", ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		c, err := redislock.New(rdb)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	holder, waiter := newApp(), newApp()
	key := dlocktest.Key(t)
	hl, err := holder.TryLock(ctx, key, dlock.WithTTL(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *dlock.Lease
		err error
		at  time.Time
	}
	done := make(chan result, 1)
	go func() {
		l, err := waiter.Lock(ctx, key, dlock.WithWait(10*time.Second))
		done <- result{l, err, time.Now()}
	}()
	eventually(t, "the waiter marks the holding and its subscription is refused", func() bool {
		return waitedFor(ctx, admin, key) && strings.Contains(logs.String(), "refused")
	})
	released := time.Now()
	if err := hl.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	defer r.l.Unlock(ctx)
	t.Logf("waiter obtained the lock %v after the release (holder's TTL 20s)", r.at.Sub(released))
	if d := r.at.Sub(released); d > 3*time.Second {
		t.Errorf("waiter obtained the lock %v after the release (the holder's TTL was 20s)", d)
	}
	if !strings.Contains(logs.String(), "could not publish") {
		t.Errorf("the refused wake-up was not logged; log:\n%s", logs.String())
	}
}

// TestSubscribingDoesNotBlockOtherWaiters: while the subscription connection
// cannot be set up (the server accepts it and never answers), a Lock on another
// key still ends with its own short context.
func TestSubscribingDoesNotBlockOtherWaiters(t *testing.T) {
	ctx := context.Background()
	p := testproxy.Start(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr, ContextTimeoutEnabled: true, MaxRetries: -1, PoolSize: 4, MinIdleConns: 4})
	t.Cleanup(func() { _ = rdb.Close() })
	w, err := redislock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	holder := newClient(t)
	a, b := dlocktest.Key(t)+"a", dlocktest.Key(t)+"b"
	for _, k := range []string{a, b} {
		l, err := holder.TryLock(ctx, k, dlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Unlock(ctx)
	}
	// Warm the pool, then stall every new connection: the subscription's.
	if _, err := w.TryLock(ctx, a); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatal(err)
	}
	eventually(t, "the pool's idle connections are open", func() bool { return p.Accepted() >= 4 })
	before := p.Accepted()
	p.Stall(true)
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	doneA := make(chan struct{})
	go func() {
		defer close(doneA)
		_, _ = w.Lock(actx, a)
	}()
	eventually(t, "the subscription connection is being dialled", func() bool { return p.Accepted() > before })
	bctx, bcancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer bcancel()
	start := time.Now()
	_, err = w.Lock(bctx, b)
	el := time.Since(start)
	t.Logf("Lock with a 100ms context returned after %v while another key's subscription was stalled", el)
	if el > time.Second {
		t.Errorf("Lock with a 100ms context took %v while another key's subscription was dialled", el)
	}
	if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lock: %v, want ErrNotObtained and the deadline", err)
	}
	cancel()
	<-doneA
	p.Stall(false)
	p.Reset()
}
