package natslock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/natslock"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Example takes a lock in a NATS bucket: the Driver over the caller's
// connection (the server NATS_URL names, as the nats tools read it), its
// bucket created once by Migrate, a Client over it. The lease's token is the
// revision of the key's message.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, err := nats.Connect(os.Getenv("NATS_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	d, _ := natslock.NewDriver(js, natslock.WithBucket("example"))
	defer d.Close()
	if err := d.Migrate(ctx); err != nil {
		fmt.Println(err)
		return
	}
	locker, _ := natslock.NewClient(d)
	lease, err := locker.Lock(ctx, "orders.42")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("held", lease.Key(), lease.Token() > 0)
	_ = lease.Unlock(ctx)

	// A key NATS cannot hold is refused before anything is written.
	_, err = locker.TryLock(ctx, "orders:42")
	fmt.Println(err != nil)
	// Output:
	// held orders.42 true
	// true
}

// ExampleDriver_Resume hands a lock from one Client to another, as a job's
// later step in another process would take it up: the first detaches its
// lease and passes the reference on, the second resumes it with the same
// fencing token, works under it and unlocks.
func ExampleDriver_Resume() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Each process has its own connection and Driver.
	var closes []func()
	defer func() {
		for _, c := range closes {
			c()
		}
	}()
	client := func() *natslock.Client {
		nc, _ := nats.Connect(os.Getenv("NATS_URL"))
		js, _ := jetstream.New(nc)
		d, _ := natslock.NewDriver(js, natslock.WithBucket("example"))
		_ = d.Migrate(ctx)
		c, _ := natslock.NewClient(d)
		closes = append(closes, d.Close, nc.Close)
		return c
	}
	lease, err := client().TryLock(ctx, "jobs.42")
	if err != nil {
		fmt.Println(err)
		return
	}
	ref, _ := lease.Detach() // the renewal stops here; the lock stays held
	// ... ref travels with the job (a queue message, a CI variable) ...

	worker := client()
	held, err := worker.Resume(ctx, ref)
	if err != nil {
		fmt.Println(err) // ErrNotHeld: the holding expired or was taken meanwhile
		return
	}
	fmt.Println(held.Key(), held.Token() == lease.Token())
	_ = held.Unlock(ctx)
	_, err = worker.Resume(ctx, ref)
	fmt.Println(errors.Is(err, dlock.ErrNotHeld))
	// Output:
	// jobs.42 true
	// true
}
