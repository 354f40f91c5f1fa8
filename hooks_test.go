package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// panicking is an Observer whose hooks named in panics panic, once armed is
// closed when it is not nil, and for key only when it is set.
type panicking struct {
	dlock.NopObserver
	panics map[string]bool
	armed  chan struct{}
	key    string
}

type hookPanic string

func (p panicking) hook(name string) {
	if p.armed != nil {
		select {
		case <-p.armed:
		default:
			return
		}
	}
	if p.panics[name] {
		panic(hookPanic(name))
	}
}

func (p panicking) AcquireEnd(ctx context.Context, e dlock.AcquireEndEvent) context.Context {
	if e.Lease != nil && (p.key == "" || e.Key == p.key) {
		p.hook("AcquireEnd")
	}
	return ctx
}

func (p panicking) Renewal(context.Context, dlock.RenewalEvent) { p.hook("Renewal") }

func (p panicking) Loss(context.Context, dlock.LossEvent) { p.hook("Loss") }
func (p panicking) Abandon(context.Context, dlock.Target) { p.hook("Abandon") }
func (p panicking) Wake(context.Context, dlock.Target)    { p.hook("Wake") }
func (p panicking) Term(_ context.Context, e dlock.LeadershipEvent) {
	if e.Leader {
		p.hook("Leadership")
	}
}

// recovered runs fn as a server that recovers its handlers' panics does, and
// returns the hook whose panic it recovered ("" when none).
func recovered(fn func()) (hook string) {
	defer func() {
		if r := recover(); r != nil {
			hook = string(r.(hookPanic))
		}
	}()
	fn()
	return ""
}

// mustBeFree fails t unless another client can take key at once.
func mustBeFree(t *testing.T, other dlock.Locker, key string) {
	t.Helper()
	ctx := context.Background()
	l, err := other.TryLock(ctx, key, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatalf("key %q still held after the panicking hook returned: %v", key, err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

func redisClient(t *testing.T) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// TestPanickingHookLeavesNoLock: a hook that panics on the caller's goroutine
// (which recovers, as net/http does) leaves no lock held, no queue entry and
// no renewal behind: the caller never got the lease, and another client takes
// the key at once.
func TestPanickingHookLeavesNoLock(t *testing.T) {
	ctx := context.Background()
	renewed := []dlock.Option{dlock.WithTTL(300 * time.Millisecond), dlock.WithAutoRenew(true)}

	t.Run("AcquireEnd of a TryLock", func(t *testing.T) {
		c := newRedisLocker(t, renewed...)
		key := dlocktest.Key(t)
		if hook := recovered(func() {
			_, _ = c.TryLock(ctx, key, dlock.WithObserver(panicking{panics: map[string]bool{"AcquireEnd": true}}))
		}); hook != "AcquireEnd" {
			t.Fatalf("recovered %q, want the AcquireEnd panic", hook)
		}
		mustBeFree(t, newRedisLocker(t), key)
	})

	t.Run("AcquireEnd of a fair Lock", func(t *testing.T) {
		c, err := redislock.NewFair(redisClient(t), renewed...)
		if err != nil {
			t.Fatal(err)
		}
		key := dlocktest.Key(t)
		if hook := recovered(func() {
			_, _ = c.Lock(ctx, key, dlock.WithObserver(panicking{panics: map[string]bool{"AcquireEnd": true}}))
		}); hook != "AcquireEnd" {
			t.Fatalf("recovered %q, want the AcquireEnd panic", hook)
		}
		other, err := redislock.NewFair(redisClient(t))
		if err != nil {
			t.Fatal(err)
		}
		mustBeFree(t, other, key)
	})

	t.Run("AcquireEnd of the second key of a LockAll", func(t *testing.T) {
		c := newRedisLocker(t, renewed...)
		first, second := dlocktest.Key(t)+".a", dlocktest.Key(t)+".b"
		if hook := recovered(func() {
			_, _ = dlock.LockAll(ctx, c, []string{first, second},
				dlock.WithObserver(panicking{panics: map[string]bool{"AcquireEnd": true}, key: second}))
		}); hook != "AcquireEnd" {
			t.Fatalf("recovered %q, want the AcquireEnd panic", hook)
		}
		mustBeFree(t, newRedisLocker(t), first)
		mustBeFree(t, newRedisLocker(t), second)
	})

	t.Run("Leadership of a Campaign", func(t *testing.T) {
		c := newRedisLocker(t, renewed...)
		key := dlocktest.Key(t)
		if hook := recovered(func() {
			_, _ = dlock.Campaign(ctx, c, key, dlock.WithObserver(panicking{panics: map[string]bool{"Leadership": true}}))
		}); hook != "Leadership" {
			t.Fatalf("recovered %q, want the Leadership panic", hook)
		}
		mustBeFree(t, newRedisLocker(t), key)
	})

	t.Run("Loss found by Err", func(t *testing.T) {
		clk := &suspendClock{}
		defer dlock.SetBootClock(clk.now)()
		c := newRedisLocker(t)
		key := dlocktest.Key(t)
		lease, err := c.TryLock(ctx, key, dlock.WithTTL(time.Minute),
			dlock.WithObserver(panicking{panics: map[string]bool{"Loss": true}}))
		if err != nil {
			t.Fatal(err)
		}
		clk.suspend(2 * time.Minute)
		if hook := recovered(func() { _ = lease.Err() }); hook != "Loss" {
			t.Fatalf("recovered %q, want the Loss panic", hook)
		}
		// The release that follows a loss found on the local side runs all
		// the same, and Unlock returns once it has.
		uctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := lease.Unlock(uctx); !errors.Is(err, dlock.ErrLockLost) || uctx.Err() != nil {
			t.Fatalf("Unlock after the loss = %v (context: %v), want ErrLockLost before the context ends", err, uctx.Err())
		}
		mustBeFree(t, newRedisLocker(t), key)
	})

	for _, hook := range []string{"Abandon", "Wake"} {
		t.Run(hook+" of a fair waiter", func(t *testing.T) {
			rdb := redisClient(t)
			holder, err := redislock.NewFair(rdb)
			if err != nil {
				t.Fatal(err)
			}
			key := dlocktest.Key(t)
			held, err := holder.TryLock(ctx, key, dlock.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			c, err := redislock.NewFair(redisClient(t), renewed...)
			if err != nil {
				t.Fatal(err)
			}
			// A waiter is woken once subscribed: the Wake hook panics at
			// the wake of the hand-over only.
			o := panicking{panics: map[string]bool{hook: true}}
			if hook == "Wake" {
				o.armed = make(chan struct{})
			}
			got := make(chan string, 1)
			go func() {
				got <- recovered(func() {
					wait := time.Minute
					if hook == "Abandon" {
						wait = 300 * time.Millisecond // gives up queued: abandons
					}
					_, _ = c.Lock(ctx, key, dlock.WithObserver(o), dlock.WithWait(wait))
				})
			}()
			if hook == "Wake" {
				// The release hands the lock to the queued waiter and wakes it.
				waitQueued(t, rdb, key)
				close(o.armed)
				if err := held.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if r := <-got; r != hook {
				t.Fatalf("recovered %q, want the %s panic", r, hook)
			}
			if n := rdb.Exists(ctx, redislock.LockKey(key)+":queue").Val(); n != 0 {
				t.Fatalf("the waiter's queue entry stayed after the %s panic", hook)
			}
			if hook == "Abandon" {
				if err := held.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			mustBeFree(t, holder, key)
		})
	}
}

// waitQueued waits until a waiter is queued for the fair lock key.
func waitQueued(t *testing.T, rdb *redis.Client, key string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for rdb.Exists(context.Background(), redislock.LockKey(key)+":queue").Val() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no waiter queued within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// blockingRenewal is an Observer whose first Renewal blocks until release is
// closed, after closing entered.
type blockingRenewal struct {
	dlock.NopObserver
	once             sync.Once
	entered, release chan struct{}
}

func (b *blockingRenewal) Renewal(context.Context, dlock.RenewalEvent) {
	first := false
	b.once.Do(func() { first = true })
	if first {
		close(b.entered)
		<-b.release
	}
}

// TestUnlockHonoursContextWhileRenewalIsTold: Unlock of a lease whose renewal
// outcome is being told to a Renewal hook that blocks returns when its context
// ends, with the lock released, instead of waiting for the hook.
func TestUnlockHonoursContextWhileRenewalIsTold(t *testing.T) {
	ctx := context.Background()
	o := &blockingRenewal{entered: make(chan struct{}), release: make(chan struct{})}
	unblock := sync.OnceFunc(func() { close(o.release) })
	defer unblock()
	c := newRedisLocker(t, dlock.WithTTL(6*time.Second), dlock.WithAutoRenew(true), dlock.WithObserver(o))
	key := dlocktest.Key(t)
	lease, err := c.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	<-o.entered
	// The hook is let go 3s after it began at the latest: an Unlock that
	// waits for it returns then.
	time.AfterFunc(3*time.Second, unblock)
	uctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = lease.Unlock(uctx)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if took > 1500*time.Millisecond {
		t.Fatalf("Unlock with a 300ms context returned after %v", took.Round(time.Millisecond))
	}
	mustBeFree(t, newRedisLocker(t), key)
	t.Logf("Unlock returned after %v", took.Round(time.Millisecond))
}

// TestPanickingRenewalHookFreesTheLock: a Renewal hook that panics ends the
// program (nothing recovers on the renewer's goroutine), and the lock is
// released before the program ends, instead of staying held until its TTL.
func TestPanickingRenewalHookFreesTheLock(t *testing.T) {
	if addr := os.Getenv("DLOCK_TEST_RENEWAL_PANIC"); addr != "" {
		holdUntilRenewalPanics(addr, os.Getenv("DLOCK_TEST_KEY"))
		return
	}
	key := dlocktest.Key(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestPanickingRenewalHookFreesTheLock$", "-test.count=1")
	cmd.Env = append(os.Environ(), "DLOCK_TEST_RENEWAL_PANIC="+redisAddr, "DLOCK_TEST_KEY="+key)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "held "+key) || !strings.Contains(string(out), `hookPanic("Renewal")`) {
		t.Fatalf("the holding process did not end with the Renewal panic (%v):\n%s", err, out)
	}
	mustBeFree(t, newRedisLocker(t), key)
}

// holdUntilRenewalPanics takes key on the Redis at addr with a lease of 10s
// renewed every 200ms, whose Observer panics at the first renewal, and waits.
func holdUntilRenewalPanics(addr, key string) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	c, err := redislock.New(rdb, dlock.WithTTL(10*time.Second), dlock.WithAutoRenew(true),
		dlock.WithRenewEvery(200*time.Millisecond), dlock.WithObserver(panicking{panics: map[string]bool{"Renewal": true}}))
	if err != nil {
		panic(err)
	}
	if _, err := c.TryLock(context.Background(), key); err != nil {
		panic(err)
	}
	fmt.Println("held " + key)
	time.Sleep(10 * time.Second) // the panic ends the process before
}
