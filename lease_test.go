package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/memlock"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// openLossWatch has c take and release a lock of its own, and waits until its
// loss subscription (which lingers) is open: a Client checks its holdings once
// when it subscribes, which would find a loss a test leaves to a renewal.
func openLossWatch(t *testing.T, c *redislock.Client) {
	t.Helper()
	testserver.OpenLossWatch(t, redisAddr, func(ctx context.Context) error {
		l, err := c.TryLock(ctx, "warm:"+t.Name())
		if err != nil {
			return err
		}
		return l.Unlock(ctx)
	})
}

func newRedisLocker(t *testing.T, opts ...dlock.Option) *redislock.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := redislock.New(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// suspendClock is a boot clock that can be moved forward, as a host suspend moves
// CLOCK_BOOTTIME but not Go's monotonic clock.
type suspendClock struct{ slept atomic.Int64 }

func (c *suspendClock) now() (time.Duration, bool) {
	return time.Duration(time.Now().UnixNano()) + time.Duration(c.slept.Load()), true
}

func (c *suspendClock) suspend(d time.Duration) { c.slept.Add(int64(d)) }

func TestLeaseLostAfterSuspend(t *testing.T) {
	clk := &suspendClock{}
	defer dlock.SetBootClock(clk.now)()
	ctx := context.Background()
	c := newRedisLocker(t)

	t.Run("checked by Err", func(t *testing.T) {
		lease, err := c.TryLock(ctx, t.Name(), dlock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer lease.Unlock(ctx)
		if err := lease.Err(); err != nil {
			t.Fatalf("fresh lease: %v", err)
		}
		clk.suspend(11 * time.Second)
		if err := lease.Err(); !errors.Is(err, dlock.ErrLockLost) {
			t.Fatalf("Err after a suspend longer than the TTL = %v, want ErrLockLost", err)
		}
		select {
		case <-lease.Done():
		default:
			t.Fatal("Done not closed once Err reported the loss")
		}
		if err := lease.Extend(ctx, 10*time.Second); !errors.Is(err, dlock.ErrLockLost) {
			t.Fatalf("Extend after the loss = %v, want ErrLockLost", err)
		}
	})

	t.Run("reported by Unlock", func(t *testing.T) {
		lease, err := c.TryLock(ctx, t.Name(), dlock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		clk.suspend(11 * time.Second)
		if err := lease.Unlock(ctx); !errors.Is(err, dlock.ErrLockLost) {
			t.Fatalf("Unlock after a suspend longer than the TTL = %v, want ErrLockLost", err)
		}
	})

	t.Run("noticed by the watchdog", func(t *testing.T) {
		lease, err := c.TryLock(ctx, t.Name(), dlock.WithTTL(time.Second), dlock.WithAutoRenew(true), dlock.WithRenewEvery(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer lease.Unlock(ctx)
		clk.suspend(2 * time.Second)
		select {
		case <-lease.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("watchdog did not report the loss after a suspend")
		}
		if err := context.Cause(lease.Context()); !errors.Is(err, dlock.ErrLockLost) {
			t.Fatalf("cause = %v, want ErrLockLost", err)
		}
	})
}

func TestRenewalSettingsRejected(t *testing.T) {
	c := newRedisLocker(t)
	ctx := context.Background()
	cases := map[string][]dlock.Option{
		"renewal interval longer than the ttl": {dlock.WithTTL(time.Second), dlock.WithAutoRenew(true), dlock.WithRenewEvery(2 * time.Second)},
		"renewal interval equal to the ttl":    {dlock.WithTTL(time.Second), dlock.WithAutoRenew(true), dlock.WithRenewEvery(time.Second)},
		"renewal interval not positive":        {dlock.WithRenewEvery(0)},
		"ttl shorter than the drift margin":    {dlock.WithTTL(dlock.MinTTL), dlock.WithDriftFactor(0.4)},
	}
	for name, opts := range cases {
		t.Run(name, func(t *testing.T) {
			if l, err := c.TryLock(ctx, dlocktest.Key(t), opts...); !errors.Is(err, dlock.ErrInvalid) {
				l.Unlock(ctx)
				t.Fatalf("TryLock = %v, want ErrInvalid", err)
			}
		})
	}
	l, err := c.TryLock(ctx, dlocktest.Key(t), dlock.WithTTL(time.Second), dlock.WithDriftFactor(0.4))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	if err := l.Extend(ctx, dlock.MinTTL); !errors.Is(err, dlock.ErrInvalid) {
		t.Fatalf("Extend with a ttl inside the drift margin = %v, want ErrInvalid", err)
	}
}

// TestWatchdogStartsAtFirstRenewal checks that a renewed lease costs no goroutine
// until its first renewal is due, and that Unlock stops a watchdog that runs.
func TestWatchdogStartsAtFirstRenewal(t *testing.T) {
	c := newRedisLocker(t)
	ctx := context.Background()
	const n = 200
	before := runtime.NumGoroutine()
	leases := make([]*dlock.Lease, 0, n)
	for i := range n {
		l, err := c.TryLock(ctx, dlocktest.Key(t)+"."+strconv.Itoa(i)) // default TTL: renewed
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	if g := runtime.NumGoroutine() - before; g >= n/2 {
		t.Errorf("%d renewed leases before their first renewal run %d more goroutines", n, g)
	}
	for _, l := range leases {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// A watchdog that has started renews, and Unlock stops it and releases.
	const ttl = 600 * time.Millisecond // room for renewals on a loaded machine
	key := dlocktest.Key(t)
	l, err := c.TryLock(ctx, key, dlock.WithTTL(ttl), dlock.WithAutoRenew(true), dlock.WithRenewEvery(ttl/5))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
		t.Fatalf("renewed lease lost: %v", l.Err())
	case <-time.After(3 * ttl):
	}
	// Still held three TTLs on: renewed (how recently depends on the machine's
	// load; the loss check above says it was in time).
	left, err := l.TTL(ctx)
	if err != nil || left <= 0 {
		t.Fatalf("TTL after three TTLs of renewal = %v, %v; want the lock still held", left, err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock with a running watchdog: %v", err)
	}
	l2, err := c.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("TryLock after Unlock: %v", err)
	}
	if err := l2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestLossIsWholeWhenSeen: whoever sees a lease lost, while the goroutine
// that ended it (here the deadline timer's) has not moved on, finds
// ErrLockLost and Done closed, from Err and from Extend. A resumed holder
// (SIGCONT) checks while its deadline timer fires.
func TestLossIsWholeWhenSeen(t *testing.T) {
	c, err := memlock.New(memlock.NewStore(), dlock.WithTTL(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l, err := c.TryLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan string, 1)
	defer dlock.SetLostHook(func(lost *dlock.Lease) {
		if lost != l {
			return
		}
		var bad []string
		if err := l.Err(); !errors.Is(err, dlock.ErrLockLost) {
			bad = append(bad, fmt.Sprintf("Err = %v", err))
		}
		select {
		case <-l.Done():
		default:
			bad = append(bad, "Done open")
		}
		if err := l.Extend(ctx, time.Second); !errors.Is(err, dlock.ErrLockLost) {
			bad = append(bad, fmt.Sprintf("Extend = %v", err))
		}
		seen <- strings.Join(bad, ", ")
	})()
	select {
	case bad := <-seen:
		if bad != "" {
			t.Fatalf("lease seen lost by another goroutine: %s", bad)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the lease was never lost")
	}
}

// A lost lease's error says why it was lost: a fixed lease's TTL ran out, the
// MaxHold cap was reached, renewals failed (and how), or the store no longer
// holds the lock.
func TestLossNamesCause(t *testing.T) {
	ctx := context.Background()
	lost := func(t *testing.T, l *dlock.Lease, want ...string) {
		t.Helper()
		select {
		case <-l.Done():
		case <-time.After(20 * time.Second):
			t.Fatal("lease not lost")
		}
		err := l.Err()
		if !errors.Is(err, dlock.ErrLockLost) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, dlock.ErrUnavailable) {
			t.Fatalf("loss %v: want ErrLockLost only", err)
		}
		if cause := context.Cause(l.Context()); cause.Error() != err.Error() {
			t.Errorf("context cause %q, Err %q", cause, err)
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("loss %q does not say %q", err, w)
			}
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("loss on more than one line: %q", err)
		}
		t.Log(err)
	}

	t.Run("fixed TTL", func(t *testing.T) {
		// A TTL that a loaded machine's round trip fits in (a grant after
		// the validity is refused), and whose expiry may be told by the
		// store before the deadline's timer fires (next subtest).
		l, err := newRedisLocker(t).TryLock(ctx, dlocktest.Key(t), dlock.WithTTL(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		lost(t, l, "fixed lease's TTL of 1s ran out", "WithAutoRenew(true)")
	})
	t.Run("told by the store past the deadline", func(t *testing.T) {
		// The local deadline has passed and its timer has not fired (a
		// suspended host's, here; a loaded one's fires late) when the
		// store tells that the holding is gone: the loss is the expiry.
		clk := &suspendClock{}
		defer dlock.SetBootClock(clk.now)()
		c := newRedisLocker(t)
		openLossWatch(t, c)
		key := dlocktest.Key(t)
		l, err := c.TryLock(ctx, key, dlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		clk.suspend(2 * time.Minute)
		if _, err := newRedisLocker(t).ForceUnlock(ctx, key); err != nil {
			t.Fatal(err)
		}
		lost(t, l, "fixed lease's TTL of 1m0s ran out", "suspended past it")
	})
	t.Run("max hold", func(t *testing.T) {
		// Renewals every third of a TTL that a loaded machine's round trip
		// fits in, as in "fixed TTL".
		l, err := newRedisLocker(t).TryLock(ctx, dlocktest.Key(t), dlock.WithTTL(time.Second),
			dlock.WithAutoRenew(true), dlock.WithMaxHold(1500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		lost(t, l, "MaxHold cap of 1.5s")
	})
	t.Run("renewals failed", func(t *testing.T) {
		srv := testserver.StartRedis(t)
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		defer rdb.Close()
		c, err := redislock.New(rdb)
		if err != nil {
			t.Fatal(err)
		}
		l, err := c.TryLock(ctx, dlocktest.Key(t), dlock.WithTTL(time.Second), dlock.WithAutoRenew(true))
		if err != nil {
			t.Fatal(err)
		}
		srv.Stop()
		lost(t, l, "no renewal succeeded before the local deadline")
		// The client may retry its dial until the renewal's deadline: the loss
		// then tells the renewal still in flight.
		if msg := l.Err().Error(); !strings.Contains(msg, "connection refused") && !strings.Contains(msg, "no reply") {
			t.Errorf("loss %q tells neither the failure nor the renewal in flight", msg)
		}
	})
	t.Run("not held", func(t *testing.T) {
		c := newRedisLocker(t)
		key := dlocktest.Key(t)
		openLossWatch(t, c)
		l, err := c.TryLock(ctx, key, dlock.WithTTL(2*time.Second), dlock.WithAutoRenew(true), dlock.WithRenewEvery(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		// Deleted by hand, which nobody is told of (no keyspace notifications
		// on the test server): the next renewal finds it gone.
		rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
		defer rdb.Close()
		if err := rdb.Del(ctx, redislock.LockKey(key)).Err(); err != nil {
			t.Fatal(err)
		}
		// Found by a renewal ("the store no longer holds it"), or by the
		// check of the holdings that the loss subscription makes once it is
		// subscribed, if a loaded machine runs that check after the
		// deletion ("the server said ... it no longer holds it").
		lost(t, l, "no longer holds it")
		// Said once: not the backend's "not held" again after it.
		if msg := l.Err().Error(); strings.Contains(msg, "not held") || strings.Count(msg, "lock lost") != 1 {
			t.Errorf("loss %q says it more than once", msg)
		}
	})
}
