package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// A holder that lost its lock (here: its lease simply ran out, as after a long
// pause) cannot write over the work of the holder that came after it.
func ExampleFence() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	locker, _ := redislock.New(rdb)
	fence, _ := redislock.NewFence(rdb)
	defer rdb.Del(ctx, "example:stock")

	first, _ := locker.TryLock(ctx, "example:stock-lock", dlock.WithTTL(300*time.Millisecond))
	_ = fence.Set(ctx, first, "example:stock", "10", 0)
	<-first.Done() // first pauses past its TTL ...

	second, _ := locker.Lock(ctx, "example:stock-lock") // ... and second takes over
	defer second.Unlock(ctx)
	n, _ := fence.IncrBy(ctx, second, "example:stock", -3)
	fmt.Println("second holder:", n)

	_, err := fence.IncrBy(ctx, first, "example:stock", -3) // first wakes up
	fmt.Println("first holder refused:", errors.Is(err, dlock.ErrStaleToken))
	fmt.Println("stock:", rdb.Get(ctx, "example:stock").Val())
	// It prints:
	// second holder: 7
	// first holder refused: true
	// stock: 7
}
