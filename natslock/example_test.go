package natslock_test

import (
	"context"
	"fmt"
	"os"
	"time"

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
