package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// TestGiveUpBeforeSendingLeavesNoMark: an acquisition whose every attempt
// gave up before its command left the client (waiting for a pooled
// connection) has nothing in flight, and its abandon leaves no mark. A storm
// of such give-ups used to leave one mark each.
func TestGiveUpBeforeSendingLeavesNoMark(t *testing.T) {
	own := testserver.StartRedis(t)
	admin := newRDB(t, own.Addr)
	for _, k := range []struct {
		name string
		new  func(rdb *redis.Client) (dlock.Locker, error)
	}{
		{"plain", func(rdb *redis.Client) (dlock.Locker, error) { return redislock.New(rdb) }},
		{"semaphore", func(rdb *redis.Client) (dlock.Locker, error) { return redislock.NewSemaphore(rdb, 1) }},
		{"reentrant", func(rdb *redis.Client) (dlock.Locker, error) { return redislock.NewReentrant(rdb) }},
	} {
		t.Run(k.name, func(t *testing.T) {
			key := "nomark-" + k.name
			holder, err := k.new(newRDB(t, own.Addr))
			if err != nil {
				t.Fatal(err)
			}
			held, err := holder.TryLock(context.Background(), key, dlock.WithTTL(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = held.Unlock(context.Background()) }()

			// One pooled connection, busy for 300 ms with a blocking command.
			rdb := testserver.RedisClient(t, own.Addr, func(o *redis.Options) { o.PoolSize, o.PoolTimeout = 1, 5*time.Second })
			locker, err := k.new(rdb)
			if err != nil {
				t.Fatal(err)
			}
			busy := make(chan error, 1)
			go func() { busy <- rdb.BLPop(context.Background(), 300*time.Millisecond, key+"-nothing").Err() }()
			for range 200 {
				if rdb.PoolStats().TotalConns-rdb.PoolStats().IdleConns == 1 {
					break
				}
				time.Sleep(time.Millisecond)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			_, err = locker.Lock(ctx, key)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, dlock.ErrNotObtained) {
				t.Fatalf("Lock: %v", err)
			}
			if err := <-busy; err != nil && !errors.Is(err, redis.Nil) {
				t.Fatal(err)
			}
			// The abandon ran once the connection was free: no mark is left.
			marks, err := admin.Keys(context.Background(), "dlock:{"+key+"}:gone:*").Result()
			if err != nil {
				t.Fatal(err)
			}
			if len(marks) != 0 {
				t.Fatalf("%d abandon marks left by an acquisition that sent nothing: %v", len(marks), marks)
			}
		})
	}
}
