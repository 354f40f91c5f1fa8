package legacy_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/legacy"
	"github.com/redis/go-redis/v9"
)

// A Go service joins a fleet whose Java services lock "lock.<name>" with a
// millisecond stamp (SETNX lock.foo <now+timeout+1>).
func ExampleNew() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	locker, err := legacy.New(rdb, legacy.Format{Key: legacy.Prefix("lock.")}, dlock.WithTTL(10*time.Second))
	if err != nil {
		panic(err)
	}

	lease, err := locker.TryLock(ctx, "example-foo")
	if err != nil {
		panic(err)
	}
	// What an old client reads: a stamp about ten seconds ahead, so it keeps out.
	stamp, _ := rdb.Get(ctx, "lock.example-foo").Int64()
	ahead := time.Until(time.UnixMilli(stamp))
	fmt.Println("old clients see it held:", ahead > 9*time.Second && ahead <= 10*time.Second+time.Millisecond)

	// Another dlock locker is kept out the same way.
	_, err = locker.TryLock(ctx, "example-foo")
	fmt.Println("second TryLock:", errors.Is(err, dlock.ErrNotObtained))

	if err := lease.Unlock(ctx); err != nil {
		panic(err)
	}
	fmt.Println("key after Unlock:", rdb.Exists(ctx, "lock.example-foo").Val())
	// It prints:
	// old clients see it held: true
	// second TryLock: true
	// key after Unlock: 0
}

// Phase 1 of a migration: a Bridge holds the fleet's legacy key (seed 002's
// "<key>_lock" in milliseconds) and dlock's own lock for the same name. Phase 2
// replaces it by redislock.New, which hands out the same fencing tokens.
func ExampleNewBridge() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	bridge, err := legacy.NewBridge(rdb, legacy.Format{Key: legacy.Suffix("_lock")})
	if err != nil {
		panic(err)
	}
	err = dlock.Do(ctx, bridge, "example-account:1", func(ctx context.Context) error {
		s, _ := rdb.Get(ctx, "example-account:1_lock").Result()
		_, perr := strconv.ParseInt(s, 10, 64)
		fmt.Println("legacy key holds a stamp:", perr == nil)
		fmt.Println("redislock key:", rdb.Exists(ctx, "dlock:{example-account:1}").Val())
		return nil
	})
	fmt.Println("done:", err)
	// It prints:
	// legacy key holds a stamp: true
	// redislock key: 1
	// done: <nil>
}
