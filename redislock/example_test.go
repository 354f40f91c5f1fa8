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

func ExampleNew() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	locker, err := redislock.New(rdb, dlock.WithTTL(10*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	err = dlock.Do(ctx, locker, "example:report", func(ctx context.Context) error {
		fmt.Println("writing the report alone")
		return nil
	})
	fmt.Println("done:", err)
	// It prints:
	// writing the report alone
	// done: <nil>
}

func ExampleNewFair() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
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
		for n := 0; n < 1000; n++ {
			if info, _ := locker.Inspect(ctx, "printer"); info.Waiters > i {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	_ = holder.Unlock(ctx) // hands the lock to the head of the queue
	for range 3 {
		fmt.Println(<-served)
	}
	// It prints:
	// first
	// second
	// third
}

func ExampleNewSemaphore() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	// At most two workers at once on the partner's API.
	sem, err := redislock.NewSemaphore(rdb, 2)
	if err != nil {
		panic(err)
	}
	a, _ := sem.TryLock(ctx, "partner-api")
	b, _ := sem.TryLock(ctx, "partner-api")
	_, err = sem.TryLock(ctx, "partner-api")
	fmt.Println("third permit:", errors.Is(err, dlock.ErrNotObtained))
	info, _ := sem.Inspect(ctx, "partner-api")
	fmt.Printf("%d of %d permits in use\n", info.Holders, info.Limit)

	// Another client that thinks there are five permits is refused.
	other, _ := redislock.NewSemaphore(rdb, 5)
	_, err = other.TryLock(ctx, "partner-api")
	fmt.Println("N=5:", errors.Is(err, redislock.ErrLimitMismatch))

	_ = a.Unlock(ctx)
	_ = b.Unlock(ctx)
	// It prints:
	// third permit: true
	// 2 of 2 permits in use
	// N=5: true
}

func ExampleNewRWMutex() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	rw, err := redislock.NewRWMutex(rdb)
	if err != nil {
		panic(err)
	}
	// Rebuild the catalogue under the write lock, then keep reading it while
	// other readers come in: a downgrade lets no writer in between.
	w, err := rw.Lock(ctx, "catalogue")
	if err != nil {
		panic(err)
	}
	r, err := rw.Downgrade(ctx, w)
	if err != nil {
		panic(err)
	}
	r2, err := rw.RLocker().TryLock(ctx, "catalogue")
	fmt.Println("second reader:", err == nil, r2.Token() > r.Token())
	_, err = rw.TryLock(ctx, "catalogue")
	fmt.Println("writer while reading:", errors.Is(err, dlock.ErrNotObtained))
	_, err = rw.Upgrade(ctx, r)
	fmt.Println("upgrade:", errors.Is(err, redislock.ErrUpgrade))
	_ = r.Unlock(ctx)
	_ = r2.Unlock(ctx)
	// It prints:
	// second reader: true true
	// writer while reading: true
	// upgrade: true
}
