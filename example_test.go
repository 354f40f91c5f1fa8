package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/memlock"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// A lock on Redis: lock, work, unlock. It needs a redis-server on
// 127.0.0.1:6379, so it is not run as a test; the examples below run on
// memlock, the in-memory backend, and every backend behaves the same.
func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()

	locker, err := redislock.New(rdb)
	if err != nil {
		panic(err)
	}
	lease, err := locker.Lock(ctx, "reports:nightly")
	if err != nil {
		panic(err)
	}
	fmt.Println("holding", lease.Key(), "with fencing token", lease.Token())
	if err := lease.Unlock(ctx); err != nil {
		panic(err)
	}
	fmt.Println("released")
}

func ExampleClient_TryLock() {
	ctx := context.Background()
	locker, _ := memlock.New(memlock.NewStore())

	first, _ := locker.TryLock(ctx, "feed:pull")
	defer first.Unlock(ctx)

	_, err := locker.TryLock(ctx, "feed:pull")
	var busy *dlock.BusyError
	fmt.Println(errors.Is(err, dlock.ErrNotObtained), errors.As(err, &busy) && busy.Remaining > 0)
	// Output: true true
}

func ExampleWithWait() {
	ctx := context.Background()
	locker, _ := memlock.New(memlock.NewStore())

	holder, _ := locker.TryLock(ctx, "stock:sku-1")
	defer holder.Unlock(ctx)

	// Wait at most 50ms for the lock.
	_, err := locker.Lock(ctx, "stock:sku-1", dlock.WithWait(50*time.Millisecond))
	fmt.Println(errors.Is(err, dlock.ErrNotObtained))
	// Output: true
}

// A read-modify-write of a counter in Redis that loses no update, whatever
// the number of processes doing it (it needs a redis-server on 127.0.0.1:6379).
func ExampleDo() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	locker, _ := redislock.New(rdb)

	err := dlock.Do(ctx, locker, "counter", func(ctx context.Context) error {
		n, err := rdb.Get(ctx, "example:counter").Int()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		return rdb.Set(ctx, "example:counter", n+1, 0).Err()
	})
	fmt.Println(err, rdb.Get(ctx, "example:counter").Val())
}

func ExampleLease_Done() {
	ctx := context.Background()
	locker, _ := memlock.New(memlock.NewStore())

	// A fixed 50ms lease with no renewal: Done fires at its local deadline,
	// before the key expires in the store.
	lease, _ := locker.TryLock(ctx, "job:short", dlock.WithTTL(50*time.Millisecond))
	<-lease.Done()
	fmt.Println(errors.Is(lease.Err(), dlock.ErrLockLost), lease.Deadline().Before(time.Now()))
	// Output: true true
}

// Two instances campaign for one role: the first leads until it resigns, then
// the second takes over with a greater fencing token.
func ExampleCampaign() {
	ctx := context.Background()
	store := memlock.NewStore()
	a, _ := memlock.New(store) // instance A
	b, _ := memlock.New(store) // instance B

	leaderA, err := dlock.Campaign(ctx, a, "feed-puller")
	if err != nil {
		panic(err)
	}
	fmt.Println("A leads:", leaderA.Role())

	// B waits for the role; here at most 50ms, while A still leads.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = dlock.Campaign(short, b, "feed-puller")
	cancel()
	fmt.Println("B leads meanwhile:", err == nil)

	// A's work runs under leaderA.Context(), which ends if leadership is lost.
	if err := leaderA.Resign(ctx); err != nil {
		panic(err)
	}
	leaderB, err := dlock.Campaign(ctx, b, "feed-puller")
	if err != nil {
		panic(err)
	}
	fmt.Println("B leads after A resigned, with a greater token:", leaderB.Token() > leaderA.Token())
	_ = leaderB.Resign(ctx)
	// Output:
	// A leads: feed-puller
	// B leads meanwhile: false
	// B leads after A resigned, with a greater token: true
}

// A transfer between two accounts takes both locks, in sorted order whatever
// the order given, so that two transfers in opposite directions cannot
// deadlock.
func ExampleLockAll() {
	ctx := context.Background()
	locker, _ := memlock.New(memlock.NewStore())

	g, err := dlock.LockAll(ctx, locker, []string{"account:bob", "account:alice"})
	if err != nil {
		panic(err)
	}
	fmt.Println("holding", g.Keys())
	fmt.Println("a token per key:", g.Token("account:alice") > 0, g.Token("account:bob") > 0)

	// Nobody else takes either key meanwhile.
	_, err = dlock.TryLockAll(ctx, locker, []string{"account:alice", "account:carol"})
	fmt.Println("another transfer from alice:", errors.Is(err, dlock.ErrNotObtained))

	// The work runs under g.Context(), which ends if any lock is lost.
	fmt.Println("unlock:", g.Unlock(ctx))
	// Output:
	// holding [account:alice account:bob]
	// a token per key: true true
	// another transfer from alice: true
	// unlock: <nil>
}
