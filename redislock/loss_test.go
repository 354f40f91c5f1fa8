package redislock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// pushBound is how soon a pushed loss must close a lease's Done: far below
// the renewal interval of dlocktest.PushedTTL (10 s).
const pushBound = 2 * time.Second

// lossSubscribed waits until n Clients of the server behind admin listen for
// pushed losses (one pattern subscription each, or two patterns with keyspace
// notifications).
func lossSubscribed(t testing.TB, ctx context.Context, admin *redis.Client, n int) {
	t.Helper()
	for range 400 {
		if got, _ := admin.Do(ctx, "PUBSUB", "NUMPAT").Int(); got >= n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no loss subscription on the server")
}

// forcer is a dlocktest.PushedLoss removal by the Inspector of the server
// behind admin.
func forcer(t testing.TB, admin *redis.Client, patterns int) func(context.Context, *dlock.Lease) (time.Time, error) {
	in, err := redislock.NewInspector(admin)
	if err != nil {
		t.Fatal(err)
	}
	return func(ctx context.Context, l *dlock.Lease) (time.Time, error) {
		lossSubscribed(t, ctx, admin, patterns)
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
		lossSubscribed(t, ctx, admin, 2)
		start := time.Now()
		return start, admin.Del(ctx, redislock.LockKey(l.Key())).Err()
	})
	t.Logf("DEL by another client to Done: %v", took)
}
