package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// TestPlainLockWakeSkipsDeadWaiter: a process that died while waiting (its
// go-redis client closed, without giving up its wait) stays first on the
// waiting set; the release must wake the live waiter behind it at once, not
// leave it asleep until the holder's TTL (20 s). Before, the release took the
// dead process's id off the set and woke nobody; Inspect counted the dead
// process as a waiter. On Redis Cluster the subscribers of a shard channel
// are counted.
func TestPlainLockWakeSkipsDeadWaiter(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		wakeSkipsDeadWaiter(t, func(t *testing.T) redis.UniversalClient { return newRDB(t, srv.Addr) })
	})
	t.Run("cluster", func(t *testing.T) {
		cluster := testserver.StartCluster(t, 3)
		wakeSkipsDeadWaiter(t, func(t *testing.T) redis.UniversalClient {
			rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = rdb.Close() })
			return rdb
		})
	})
}

func wakeSkipsDeadWaiter(t *testing.T, newRDB func(t *testing.T) redis.UniversalClient) {
	const ttl = 20 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	key := dlocktest.Key(t)
	probe := newRDB(t)
	inSet := func(what string, n int64) {
		eventually(t, what, func() bool { return probe.ZCard(ctx, redislock.WaitingKey(key)).Val() == n })
	}
	newClient := func(opts ...dlock.Option) *redislock.Client {
		c, err := redislock.New(newRDB(t), opts...)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	held, err := newClient(dlock.WithTTL(ttl)).TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}

	deadRDB := newRDB(t)
	dead, err := redislock.New(deadRDB)
	if err != nil {
		t.Fatal(err)
	}
	dctx, dcancel := context.WithCancel(ctx)
	deadDone := make(chan error, 1)
	go func() { _, err := dead.Lock(dctx, key); deadDone <- err }()
	inSet("the doomed waiter waits in the set", 1)
	deadID := probe.ZRange(ctx, redislock.WaitingKey(key), 0, 0).Val()[0]
	// It dies: its connections close, and its waiter can no longer reach the
	// server to take itself off the set.
	if err := deadRDB.Close(); err != nil {
		t.Fatal(err)
	}

	liveDone := make(chan error, 1)
	live := newClient()
	go func() {
		l, err := live.Lock(ctx, key, dlock.WithWait(2*ttl))
		if err == nil {
			err = l.Unlock(ctx)
		}
		liveDone <- err
	}()
	inSet("the live waiter waits too", 2)
	// Waiters of one holding tie (their score is its token) and are ordered
	// by id: the dead one goes first.
	if err := probe.ZAddXX(ctx, redislock.WaitingKey(key), redis.Z{Score: 0, Member: deadID}).Err(); err != nil {
		t.Fatal(err)
	}
	// Inspect (dlock status) counts the live one alone.
	if info, err := live.Inspect(ctx, key); err != nil || info.Waiters != 1 {
		t.Errorf("Inspect with a dead and a live waiter: %d waiters (%v), want 1", info.Waiters, err)
	}
	released := time.Now()
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-liveDone; err != nil {
		t.Fatal(err)
	}
	if d := time.Since(released); d > 2*time.Second {
		t.Errorf("the live waiter got the free lock %v after the release, want at once (the holder's TTL was %v)", d.Round(time.Millisecond), ttl)
	}
	dcancel()
	<-deadDone
	if n := probe.ZCard(ctx, redislock.WaitingKey(key)).Val(); n != 0 {
		t.Errorf("%d processes left on the waiting set, want none", n)
	}
}

// TestPlainLockGiveUpLeavesNoEntry: a Lock that gives up returns once its
// process is off the waiting set, so that a program that exits at once (its
// connections closed) leaves no entry there for a release to wake in vain.
func TestPlainLockGiveUpLeavesNoEntry(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := dlocktest.Key(t)
	probe := newRDB(t, srv.Addr)
	held, err := newClient(t, dlock.WithTTL(20*time.Second)).TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Unlock(ctx) }()
	for _, stop := range []string{"deadline", "cancel"} {
		rdb := newRDB(t, srv.Addr)
		c, err := redislock.New(rdb)
		if err != nil {
			t.Fatal(err)
		}
		// A --wait of a second that runs out, or a Ctrl-C while waiting.
		wctx, wcancel := context.WithTimeout(ctx, time.Second)
		if stop == "cancel" {
			wctx, wcancel = context.WithCancel(ctx)
		}
		done := make(chan error, 1)
		go func() { _, err := c.Lock(wctx, key); done <- err }()
		eventually(t, "the waiter waits in the set", func() bool { return probe.ZCard(ctx, redislock.WaitingKey(key)).Val() == 1 })
		if stop == "cancel" {
			wcancel()
		}
		err = <-done
		wcancel()
		if !errors.Is(err, dlock.ErrNotObtained) && !errors.Is(err, context.Canceled) {
			t.Fatalf("%s: Lock: %v", stop, err)
		}
		_ = rdb.Close() // the program exits
		if n := probe.ZCard(ctx, redislock.WaitingKey(key)).Val(); n != 0 {
			t.Errorf("%s: %d processes left on the waiting set after Lock gave up, want none", stop, n)
		}
	}
}
