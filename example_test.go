package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// redisAddr is the address of the redis-server TestMain starts for the examples.
var redisAddr string

func TestMain(m *testing.M) {
	os.Exit(testserver.Main(m, func(r *testserver.Redis) { redisAddr = r.Addr }))
}

func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()

	locker, err := redislock.New(rdb)
	if err != nil {
		panic(err)
	}
	lease, err := locker.Lock(ctx, "reports:nightly")
	if err != nil {
		panic(err)
	}
	fmt.Println("holding", lease.Key(), "with a fencing token:", lease.Token() > 0)
	if err := lease.Unlock(ctx); err != nil {
		panic(err)
	}
	fmt.Println("released")
	// Output:
	// holding reports:nightly with a fencing token: true
	// released
}

func ExampleClient_TryLock() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	locker, _ := redislock.New(rdb)

	first, _ := locker.TryLock(ctx, "feed:pull")
	defer first.Unlock(ctx)

	_, err := locker.TryLock(ctx, "feed:pull")
	var busy *dlock.BusyError
	fmt.Println(errors.Is(err, dlock.ErrNotObtained), errors.As(err, &busy) && busy.Remaining > 0)
	// Output: true true
}

func ExampleWithWait() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	locker, _ := redislock.New(rdb)

	holder, _ := locker.TryLock(ctx, "stock:sku-1")
	defer holder.Unlock(ctx)

	// Wait at most 50ms for the lock (seed 004's tryLock(time)).
	_, err := locker.Lock(ctx, "stock:sku-1", dlock.WithWait(50*time.Millisecond))
	fmt.Println(errors.Is(err, dlock.ErrNotObtained))
	// Output: true
}

func ExampleDo() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	locker, _ := redislock.New(rdb)

	// A read-modify-write of a shared counter that loses no update.
	err := dlock.Do(ctx, locker, "counter", func(ctx context.Context) error {
		n, err := rdb.Get(ctx, "example:counter").Int()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		if n < 5 {
			n++
		}
		return rdb.Set(ctx, "example:counter", n, time.Minute).Err()
	})
	fmt.Println(err, rdb.Get(ctx, "example:counter").Val())
	// Output: <nil> 1
}

func ExampleLease_Done() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	locker, _ := redislock.New(rdb)

	// A fixed 50ms lease with no renewal: Done fires at its local deadline,
	// before the key expires on the server.
	lease, _ := locker.TryLock(ctx, "job:short", dlock.WithTTL(50*time.Millisecond))
	<-lease.Done()
	fmt.Println(errors.Is(lease.Err(), dlock.ErrLockLost), lease.Deadline().Before(time.Now()))
	// Output: true true
}
