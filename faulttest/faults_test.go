package faulttest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testproxy"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// summary logs the one-line figures of a scenario.
func summary(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Logf("SUMMARY %s: "+format, append([]any{t.Name()}, args...)...)
}

func newRDB(t *testing.T, addr string) *redis.Client { return testserver.RedisClient(t, addr) }

func newLocker(t *testing.T, rdb redis.UniversalClient, opts ...dlock.Option) *redislock.Client {
	t.Helper()
	c, err := redislock.New(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newFence(t *testing.T, rdb redis.UniversalClient) *redislock.Fence {
	t.Helper()
	f, err := redislock.NewFence(rdb)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// contend polls TryLock every 2ms until it succeeds or timeout passes. It returns
// the lease, mono() just before the successful attempt was sent (the earliest the
// server can have granted it), and the number of attempts refused before.
func contend(t *testing.T, l dlock.Locker, key string, timeout time.Duration, opts ...dlock.Option) (*dlock.Lease, int64, int) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(timeout)
	refused := 0
	for time.Now().Before(deadline) {
		start := mono()
		lease, err := l.TryLock(ctx, key, opts...)
		if err == nil {
			t.Cleanup(func() { _ = lease.Unlock(ctx) })
			return lease, start, refused
		}
		if !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("TryLock: %v", err)
		}
		refused++
		time.Sleep(2 * time.Millisecond) // poll interval
	}
	t.Fatalf("%q not acquired within %v (%d attempts refused)", key, timeout, refused)
	return nil, 0, 0
}

// serverExpiry returns when the lock key of key expires, in server microseconds
// (the unit of redislock fencing tokens), read atomically with the server clock.
func serverExpiry(t *testing.T, rdb *redis.Client, key string) int64 {
	t.Helper()
	v, err := rdb.Eval(context.Background(), `local now = redis.call('TIME')
return {tonumber(now[1]) * 1000000 + tonumber(now[2]), redis.call('PTTL', KEYS[1])}`,
		[]string{redislock.LockKey(key)}).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	if v[1] < 0 {
		t.Fatalf("lock key has PTTL %d", v[1])
	}
	return v[0] + v[1]*1000
}

// TestHolderKilled: a holder killed with SIGKILL stops renewing; another client
// gets the lock once the TTL has run out on the server, never before.
func TestHolderKilled(t *testing.T) {
	srv := testserver.StartRedis(t)
	rdb := newRDB(t, srv.Addr)
	key := dlocktest.Key(t)
	const ttl = 400 * time.Millisecond
	holder := startChild(t, "hold", "ADDR="+srv.Addr, "KEY="+key, "TTL=400", "RENEW=100")
	acq := holder.next(t, "acquired", 10*time.Second)

	// Let the watchdog renew a few times, then kill the holder mid-lease.
	time.Sleep(250 * time.Millisecond) // let renewals happen (not a synchronisation)
	holder.signal(t, syscall.SIGKILL)
	killed := mono()
	expiry := serverExpiry(t, rdb, key)

	lease, start, refused := contend(t, newLocker(t, rdb), key, 5*time.Second, dlock.WithTTL(time.Second))
	// redislock tokens are never below the server clock in microseconds at the
	// grant: a grant before the old key's expiry would carry a smaller token.
	if lease.Token() < uint64(expiry)-1000 {
		t.Fatalf("acquired at server time %dµs, before the killed holder's key expired at %dµs", lease.Token(), expiry)
	}
	if lease.Token() <= acq.Token {
		t.Fatalf("token %d not above the killed holder's %d", lease.Token(), acq.Token)
	}
	wait := time.Duration(start - killed)
	if wait > ttl+time.Second {
		t.Fatalf("acquired %v after the kill, want within the TTL %v plus polling", wait, ttl)
	}
	summary(t, "acquisitions=2 refused-before-expiry=%d kill-to-acquire=%s granted-after-server-expiry-by=%dµs ttl=%v",
		refused, ms(start-killed), int64(lease.Token())-expiry, ttl)
}

// TestHolderPaused: a holder stopped with SIGSTOP for longer than the TTL is
// overtaken; after SIGCONT it sees the loss at its first check, and its fenced
// write is rejected.
func TestHolderPaused(t *testing.T) {
	srv := testserver.StartRedis(t)
	rdb := newRDB(t, srv.Addr)
	key := dlocktest.Key(t)
	res := "resource:" + key
	holder := startChild(t, "hold", "ADDR="+srv.Addr, "KEY="+key, "TTL=300", "RENEW=100", "RESOURCE="+res)
	acq := holder.next(t, "acquired", 10*time.Second)
	holder.send(t, "write")
	if w := holder.next(t, "wrote", 5*time.Second); w.Err != "<nil>" || w.N != 1 {
		t.Fatalf("first write: %+v", w)
	}

	holder.signal(t, syscall.SIGSTOP)
	stopped := mono()
	lease, start, refused := contend(t, newLocker(t, rdb), key, 5*time.Second, dlock.WithTTL(10*time.Second))
	if lease.Token() <= acq.Token {
		t.Fatalf("new token %d not above the paused holder's %d", lease.Token(), acq.Token)
	}
	if n, err := newFence(t, rdb).IncrBy(context.Background(), lease, res, 1); err != nil || n != 2 {
		t.Fatalf("new holder's fenced write: %d %v", n, err)
	}

	holder.signal(t, syscall.SIGCONT)
	resumed := mono()
	holder.send(t, "check")
	chk := holder.next(t, "check", 5*time.Second)
	if !chk.Lost || !chk.Done {
		t.Fatalf("resumed holder's first check: %+v, want ErrLockLost with Done closed", chk)
	}
	holder.send(t, "write") // a holder that writes without checking, or was paused after its check
	w := holder.next(t, "wrote", 5*time.Second)
	if !w.Stale {
		t.Fatalf("resumed holder's fenced write: %+v, want ErrStaleToken", w)
	}
	lost := holder.next(t, "lost", 5*time.Second)
	if v, _ := rdb.Get(context.Background(), res).Int(); v != 2 {
		t.Fatalf("resource = %d, want 2 (one write per holder)", v)
	}
	summary(t, "acquisitions=2 stop-to-new-acquire=%s refused-while-paused=%d stale-writes-rejected=1 stale-writes-accepted=0 resume-to-check=%s resume-to-Done=%s (Done closed at first check: %v)",
		ms(start-stopped), refused, ms(chk.T-resumed), ms(lost.T-resumed), chk.Done)
}

// TestConnectionCut: the connection between a holder and Redis is black-holed, or
// slowed beyond the TTL; the holder is told before anybody else acquires (C5,
// on one monotonic clock), and after the heal its extend cannot resurrect the lock.
func TestConnectionCut(t *testing.T) {
	srv := testserver.StartRedis(t)
	direct := newRDB(t, srv.Addr)
	proxy := testproxy.Start(t, srv.Addr)
	const ttl = 400 * time.Millisecond
	// A drift factor of 10% (42ms) leaves room for the delivery of Done (a timer
	// goroutine, then the observer) on a loaded CI machine; the margin is logged.
	holder := newLocker(t, newRDB(t, proxy.Addr), dlock.WithTTL(ttl), dlock.WithAutoRenew(true),
		dlock.WithRenewEvery(100*time.Millisecond), dlock.WithDriftFactor(0.1))
	contender := newLocker(t, direct)
	faults := map[string]func(on bool){
		"blackhole": func(on bool) {
			proxy.Blackhole(testproxy.Upstream, on)
			proxy.Blackhole(testproxy.Downstream, on)
		},
		"delay": func(on bool) {
			d := time.Duration(0)
			if on {
				d = ttl
			}
			proxy.SetLatency(testproxy.Upstream, d)
			proxy.SetLatency(testproxy.Downstream, d)
		},
	}
	for _, name := range []string{"blackhole", "delay"} {
		fault := faults[name]
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			key := dlocktest.Key(t)
			a, err := holder.TryLock(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Unlock(ctx)
			first := a.Deadline()
			for renewed := time.Now().Add(2 * time.Second); !a.Deadline().After(first); time.Sleep(5 * time.Millisecond) {
				if time.Now().After(renewed) {
					t.Fatal("no renewal through the proxy")
				}
			}

			now0, mono0 := time.Now(), mono()
			var done atomic.Int64
			watched := make(chan struct{})
			go func() { <-a.Done(); done.Store(mono()); close(watched) }()
			cut := mono()
			fault(true)
			defer fault(false)
			b, start, refused := contend(t, contender, key, 5*time.Second, dlock.WithTTL(time.Second))
			select {
			case <-watched:
			case <-time.After(5 * time.Second):
				t.Fatal("holder never notified")
			}
			tDone := done.Load()
			deadline := mono0 + int64(a.Deadline().Sub(now0)) // when the lease counted as lost
			if deadline > start {
				t.Fatalf("C5 violated: holder's deadline %s after the new holder's acquire began", ms(deadline-start))
			}
			if tDone > start {
				t.Fatalf("C5 violated: holder notified %s after the new holder's acquire began", ms(tDone-start))
			}
			if !errors.Is(a.Err(), dlock.ErrLockLost) {
				t.Fatalf("holder's Err = %v, want ErrLockLost", a.Err())
			}
			fault(false)
			if err := a.Extend(ctx, ttl); !errors.Is(err, dlock.ErrLockLost) {
				t.Fatalf("extend after the heal = %v, want ErrLockLost", err)
			}
			if _, err := b.TTL(ctx); err != nil {
				t.Fatalf("new holder lost the lock after the old one's extend: %v", err)
			}
			summary(t, "acquisitions=2 overlap=0 cut-to-notified=%s notified-before-new-acquire-by=%s (deadline-before-by=%s) refused-while-old-key-lived=%d ttl=%v",
				ms(tDone-cut), ms(start-tDone), ms(start-deadline), refused, ttl)
		})
	}
}

// TestRedisRestart: Redis restarts without persistence while locks are held; each
// holder is told at its next renewal, and tokens issued afterwards are larger than
// every token issued before.
func TestRedisRestart(t *testing.T) {
	srv := testserver.StartRedis(t)
	rdb := newRDB(t, srv.Addr)
	const every = 100 * time.Millisecond
	locker := newLocker(t, rdb, dlock.WithTTL(time.Second), dlock.WithAutoRenew(true), dlock.WithRenewEvery(every))
	ctx := context.Background()
	var (
		keys   []string
		leases []*dlock.Lease
		maxOld uint64
	)
	for i := 0; i < 3; i++ {
		key := fmt.Sprintf("%s.%d", dlocktest.Key(t), i)
		for j := 0; j < 3; j++ { // a few acquisitions per key before the restart
			l, err := locker.TryLock(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			maxOld = max(maxOld, l.Token())
			if j < 2 {
				_ = l.Unlock(ctx)
			} else {
				leases = append(leases, l)
				defer l.Unlock(ctx)
			}
		}
		keys = append(keys, key)
	}

	down := mono()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	up := mono()
	var worst int64
	for i, l := range leases {
		select {
		case <-l.Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("holder %d not notified after the restart", i)
		}
		at := mono()
		// The holder learns it from a refused renewal, or sooner from its
		// loss subscription, which checks its holdings when it subscribes
		// again to the restarted server.
		if err := l.Err(); !errors.Is(err, dlock.ErrLockLost) || !strings.Contains(err.Error(), "extend refused") && !strings.Contains(err.Error(), "the server said") {
			t.Fatalf("holder %d: %v, want ErrLockLost from a refused renewal or the loss subscription", i, err)
		}
		worst = max(worst, at-up)
	}
	fresh := 0
	for _, key := range keys {
		for j := 0; j < 2; j++ {
			l, err := locker.TryLock(ctx, key)
			if err != nil {
				t.Fatalf("acquire after the restart: %v", err)
			}
			if l.Token() <= maxOld {
				t.Fatalf("token %d after the restart not above %d before", l.Token(), maxOld)
			}
			fresh++
			_ = l.Unlock(ctx)
		}
	}
	summary(t, "holders=%d notified=%d restart-took=%s up-to-last-notified=%s (renew every %v) tokens-after=%d all-above-max-token-before=%d",
		len(leases), len(leases), ms(up-down), ms(worst), every, fresh, maxOld)
}

// TestHammer: several processes, several goroutines each, do a non-atomic
// GET+SET increment of one counter under the lock: no update may be lost.
func TestHammer(t *testing.T) {
	srv := testserver.StartRedis(t)
	rdb := newRDB(t, srv.Addr)
	key := dlocktest.Key(t)
	counter := "counter:" + key
	const procs, goroutines, iter = 3, 8, 25
	began := time.Now()
	var children []*child
	for p := 0; p < procs; p++ {
		children = append(children, startChild(t, "hammer", "ADDR="+srv.Addr, "KEY="+key, "COUNTER="+counter,
			fmt.Sprintf("GOROUTINES=%d", goroutines), fmt.Sprintf("ITER=%d", iter)))
	}
	var acked int64
	for _, c := range children {
		acked += c.next(t, "done", 90*time.Second).N
	}
	took := time.Since(began)
	final, err := rdb.Get(context.Background(), counter).Int64()
	if err != nil {
		t.Fatal(err)
	}
	if acked != procs*goroutines*iter || final != acked {
		t.Fatalf("counter %d, acknowledged increments %d, want both %d: %d updates lost", final, acked, procs*goroutines*iter, acked-final)
	}
	summary(t, "processes=%d goroutines=%d acquisitions=%d final=%d lost-updates=0 took=%v (%.0f acquisitions/s)",
		procs, procs*goroutines, acked, final, took.Round(time.Millisecond), float64(acked)/took.Seconds())
}

// TestUnfencedLosesUpdate is the checker's sanity run (RELIABILITY C2): under a
// deterministic pause past the TTL, the unfenced read-modify-write loses an update
// and the fenced one does not. A checker that could not see the first would prove
// nothing about the others.
func TestUnfencedLosesUpdate(t *testing.T) {
	srv := testserver.StartRedis(t)
	rdb := newRDB(t, srv.Addr)
	locker := newLocker(t, rdb, dlock.WithTTL(200*time.Millisecond))
	fence := newFence(t, rdb)
	ctx := context.Background()
	key := dlocktest.Key(t)
	plain, fenced := "plain:"+key, "fenced:"+key
	var plainAcks, fencedAcks, staleRejected, staleAccepted int

	// incr is one read-modify-write of both counters, paused between read and write.
	incr := func(l *dlock.Lease, pause func()) {
		pv, _ := rdb.Get(ctx, plain).Int()
		fv, _ := rdb.Get(ctx, fenced).Int()
		pause()
		if rdb.Set(ctx, plain, pv+1, 0).Err() == nil {
			plainAcks++
		}
		switch err := fence.Set(ctx, l, fenced, fmt.Sprint(fv+1), 0); {
		case err == nil:
			fencedAcks++
		case errors.Is(err, dlock.ErrStaleToken):
			staleRejected++
		default:
			t.Fatal(err)
		}
	}

	a, err := locker.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	incr(a, func() {
		<-a.Done() // a pauses past its TTL ...
		b, _, _ := contend(t, locker, key, 5*time.Second)
		incr(b, func() {}) // ... while b does a whole increment
		_ = b.Unlock(ctx)
	})
	pv, _ := rdb.Get(ctx, plain).Int()
	fv, _ := rdb.Get(ctx, fenced).Int()
	lostPlain, lostFenced := plainAcks-pv, fencedAcks-fv
	if lostPlain < 1 {
		t.Fatalf("unfenced workload lost no update (acks %d, value %d): the checker cannot fail", plainAcks, pv)
	}
	if lostFenced != 0 || staleRejected != 1 {
		t.Fatalf("fenced workload: acks %d, value %d, stale rejected %d", fencedAcks, fv, staleRejected)
	}
	summary(t, "unfenced: acknowledged=%d final=%d lost=%d; fenced: acknowledged=%d final=%d lost=0 stale-writes-rejected=%d stale-writes-accepted=%d",
		plainAcks, pv, lostPlain, fencedAcks, fv, staleRejected, staleAccepted)
}
