package zklock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/zklock"
)

// A lock on a ZooKeeper ensemble: one driver (one session) per process, a
// Client over it, and the same Lease, fencing token and loss signal as on every
// backend. It needs ZooKeeper on 127.0.0.1:2181, so it is not run as a test.
func ExampleNewClient() {
	ctx := context.Background()
	connect, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	d, err := zklock.NewDriver(connect, []string{"127.0.0.1:2181"})
	if err != nil {
		fmt.Println(err) // matches dlock.ErrUnavailable when no session could be made
		return
	}
	defer d.Close()
	locker, err := zklock.NewClient(d, dlock.WithTTL(10*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}

	lease, err := locker.Lock(ctx, "reports:nightly", dlock.WithWait(30*time.Second))
	if errors.Is(err, dlock.ErrNotObtained) {
		fmt.Println("another process still runs the report")
		return
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lease.Unlock(ctx)
	fmt.Println("running the report with fencing token", lease.Token())
	select {
	case <-lease.Done(): // lost (the session expired, or a forced unlock): stop
		fmt.Println(lease.Err())
	default:
	}
}

// Who holds a lock, without taking it: the holder's WithMetadata text, its
// fencing token and the time its lease has left.
func ExampleDriver_Inspect() {
	ctx := context.Background()
	d, err := zklock.NewDriver(ctx, []string{"127.0.0.1:2181"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close()
	info, err := d.Inspect(ctx, "reports:nightly")
	switch {
	case err != nil:
		fmt.Println(err)
	case info.Held:
		fmt.Printf("held by %q, token %d, %v left\n", info.Metadata, info.Token, info.TTL)
	default:
		fmt.Println("free")
	}
}
