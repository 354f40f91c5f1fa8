package redislock_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// In one process: a function that locks the account calls another that locks it
// too. Both pass the same owner ID, so the inner call re-enters instead of
// waiting for itself.
func ExampleNewReentrant() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	locker, err := redislock.NewReentrant(rdb)
	if err != nil {
		panic(err)
	}

	audit := func(owner string) error {
		lease, err := locker.TryLock(ctx, "account:7", dlock.WithOwner(owner))
		if err != nil {
			return err
		}
		defer lease.Unlock(ctx)
		fmt.Println("audit runs under token", lease.Token() != 0)
		return nil
	}
	transfer := func(owner string) error {
		lease, err := locker.Lock(ctx, "account:7", dlock.WithOwner(owner))
		if err != nil {
			return err
		}
		defer lease.Unlock(ctx)
		return audit(owner) // re-enters: same owner ID
	}

	if err := transfer("request-81"); err != nil {
		panic(err)
	}
	// Another owner is kept out while request-81 holds the account.
	outer, _ := locker.Lock(ctx, "account:7", dlock.WithOwner("request-81"))
	err = audit("request-82")
	fmt.Println("other owner:", errors.Is(err, dlock.ErrNotObtained))
	_ = outer.Unlock(ctx)
	// It prints:
	// audit runs under token true
	// other owner: true
}

// Across processes: two instances of one deployment share the owner ID
// "deploy-42" and so hold the migration lock together; a third owner waits.
func ExampleNewReentrant_crossProcess() {
	ctx := context.Background()
	// In real use each instance is a process of its own, with its own connection.
	var conns []*redis.Client
	defer func() {
		for _, rdb := range conns {
			_ = rdb.Close()
		}
	}()
	instance := func(owner string) *redislock.Client {
		rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
		conns = append(conns, rdb)
		c, err := redislock.NewReentrant(rdb, dlock.WithOwner(owner))
		if err != nil {
			panic(err)
		}
		return c
	}
	first, second, other := instance("deploy-42"), instance("deploy-42"), instance("deploy-43")

	l1, _ := first.Lock(ctx, "schema-migration")
	l2, _ := second.Lock(ctx, "schema-migration") // same owner ID: re-enters
	_, err := other.TryLock(ctx, "schema-migration")
	fmt.Println("deploy-43 refused:", errors.Is(err, dlock.ErrNotObtained))
	info, _ := other.Inspect(ctx, "schema-migration")
	fmt.Println("held by", info.Owner)

	_ = l1.Unlock(ctx)
	_, err = other.TryLock(ctx, "schema-migration")
	fmt.Println("deploy-43 refused while one hold is left:", errors.Is(err, dlock.ErrNotObtained))
	_ = l2.Unlock(ctx)
	l3, err := other.TryLock(ctx, "schema-migration")
	fmt.Println("deploy-43 after the last hold:", err == nil)
	_ = l3.Unlock(ctx)
	// It prints:
	// deploy-43 refused: true
	// held by deploy-42
	// deploy-43 refused while one hold is left: true
	// deploy-43 after the last hold: true
}
