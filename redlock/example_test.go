package redlock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redlock"
	"github.com/redis/go-redis/v9"
)

func ExampleNew() {
	var nodes []redis.UniversalClient
	for _, addr := range []string{"redis-a:6379", "redis-b:6379", "redis-c:6379", "redis-d:6379", "redis-e:6379"} { // five independent masters
		rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		defer rdb.Close()
		nodes = append(nodes, rdb)
	}
	locker, err := redlock.New(nodes, dlock.WithTTL(10*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	lease, err := locker.Lock(ctx, "example:nightly-report", dlock.WithWait(5*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("held on a majority; token > 0:", lease.Token() > 0)
	if err := lease.Unlock(ctx); err != nil {
		fmt.Println(err)
	}
	// It prints: held on a majority; token > 0: true
}

func ExampleNewDriver() {
	var nodes []redis.UniversalClient
	for _, addr := range []string{"redis-a:6379", "redis-b:6379", "redis-c:6379"} {
		rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		defer rdb.Close()
		nodes = append(nodes, rdb)
	}
	d, err := redlock.NewDriver(nodes, redlock.WithNodeTimeout(50*time.Millisecond))
	if err != nil {
		fmt.Println(err)
		return
	}
	locker, err := redlock.NewClient(d)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%d nodes, quorum %d\n", d.Nodes(), d.Quorum())
	err = dlock.Do(context.Background(), locker, "example:job", func(ctx context.Context) error {
		return nil // the work, under a context that ends if the lock is lost
	})
	fmt.Println(err)
	// It prints:
	// 3 nodes, quorum 2
	// <nil>
}
