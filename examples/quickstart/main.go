// Command quickstart is the README's quick start as a program that runs:
//
//	REDIS_ADDR=127.0.0.1:6379 go run ./examples/quickstart
//
// It takes a lock three ways: dlock.Do, one attempt with TryLock, and Lock
// waiting at most two seconds, and prints what each did.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

func main() {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := run(ctx, addr, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// run takes a lock three ways and prints what each did.
func run(ctx context.Context, addr string, out io.Writer) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	locker, err := redislock.New(rdb) // also *redis.ClusterClient, failover clients
	if err != nil {
		return err
	}

	// Lock, run, always unlock. ctx is cancelled if the lock is lost meanwhile.
	err = dlock.Do(ctx, locker, "orders:42", func(ctx context.Context) error {
		fmt.Fprintln(out, "processed order 42")
		return nil
	})
	if err != nil {
		return err
	}

	// Or by hand: one attempt, and busy is no failure.
	lease, err := locker.TryLock(ctx, "feed:pull")
	switch {
	case errors.Is(err, dlock.ErrNotObtained):
		fmt.Fprintln(out, "feed:pull is busy: another instance pulls the feed")
	case err != nil:
		return err // ErrUnavailable, ErrInvalid, ErrConflict...
	default:
		fmt.Fprintln(out, "pulled the feed with fencing token", lease.Token())
		if err := lease.Unlock(ctx); err != nil {
			return err // ErrNotHeld: the lock expired or was taken meanwhile
		}
	}

	// Or wait at most 2s for the lock.
	lease, err = locker.Lock(ctx, "feed:pull", dlock.WithWait(2*time.Second))
	if err != nil {
		return err // matches ErrNotObtained when still busy after 2s
	}
	defer lease.Unlock(ctx)
	// The token is strictly greater than every earlier one for the key: give
	// it to the protected resource, which rejects writes with older tokens.
	fmt.Fprintln(out, "pulled the feed again with fencing token", lease.Token())
	select {
	case <-lease.Done(): // lost: stop the protected work
		return lease.Err() // matches dlock.ErrLockLost
	default:
	}
	return nil
}
