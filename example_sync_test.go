package dlock_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/memlock"
)

// Three builders count a latch down; the deployer waits for it. On Redis,
// etcd or PostgreSQL the parties are processes: redislock.NewLatch,
// etcdlock.NewLatch, pglock.NewLatch.
func ExampleLatch() {
	ctx := context.Background()
	store := memlock.NewStore()
	done := make(chan struct{})
	go func() {
		deployer, _ := dlock.NewLatch(store, "build-done", 3, time.Hour)
		if err := deployer.Wait(ctx); err == nil {
			fmt.Println("all three builds done: deploying")
		}
		close(done)
	}()
	for range 3 {
		builder, _ := dlock.NewLatch(store, "build-done", 3, time.Hour)
		if _, err := builder.CountDown(ctx); err != nil {
			panic(err)
		}
	}
	<-done
	// Output: all three builds done: deploying
}

// Two workers start a step together and finish it together.
func ExampleBarrier() {
	ctx := context.Background()
	store := memlock.NewStore()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var inside int
	for range 2 {
		wg.Go(func() {
			b, err := dlock.NewBarrier(store, "step-2", 2, 15*time.Second)
			if err != nil {
				panic(err)
			}
			if err := b.Enter(ctx); err != nil {
				panic(err)
			}
			mu.Lock()
			inside++
			mu.Unlock()
			if err := b.Leave(ctx); err != nil {
				panic(err)
			}
		})
	}
	wg.Wait()
	fmt.Println(inside, "workers ran the step")
	// Output: 2 workers ran the step
}
