package redislock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

func ExampleNewFair() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	locker, err := redislock.NewFair(rdb)
	if err != nil {
		panic(err)
	}

	holder, err := locker.TryLock(ctx, "printer")
	if err != nil {
		panic(err)
	}
	served := make(chan string)
	for i, name := range []string{"first", "second", "third"} {
		go func() {
			lease, err := locker.Lock(ctx, "printer")
			if err != nil {
				served <- err.Error()
				return
			}
			served <- name
			_ = lease.Unlock(ctx)
		}()
		// Let each waiter join the queue before the next one arrives.
		for n := 0; n < 1000 && rdb.LLen(ctx, redislock.QueueKey("printer")).Val() <= int64(i); n++ {
			time.Sleep(time.Millisecond)
		}
	}
	_ = holder.Unlock(ctx) // hands the lock to the head of the queue
	for range 3 {
		fmt.Println(<-served)
	}
	// Output:
	// first
	// second
	// third
}
