package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/etcdlock"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func ExampleNew() {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{"127.0.0.1:2379"},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cli.Close()
	locker, err := etcdlock.New(cli)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	lease, err := locker.Lock(ctx, "example:nightly-report", dlock.WithMetadata("host-a"))
	if err != nil {
		fmt.Println(err)
		return
	}
	// The lock is held, renewed in the background, until Unlock.
	_, err = locker.TryLock(ctx, "example:nightly-report")
	fmt.Println("second TryLock busy:", errors.Is(err, dlock.ErrNotObtained))
	info, _ := locker.Inspect(ctx, "example:nightly-report")
	fmt.Println("holder:", info.Metadata, "token matches:", info.Token == lease.Token())
	fmt.Println("unlock:", lease.Unlock(ctx))
	// It prints:
	// second TryLock busy: true
	// holder: host-a token matches: true
	// unlock: <nil>
}

// ExampleDriver_Resume hands a lock from one Client to another, as a job's
// later step in another process would take it up: the first detaches its
// lease and passes the reference on, the second resumes it with the same
// fencing token, works under it and unlocks. The detached holding stays on
// the first Driver's shared etcd lease until the Resume: that process must
// not close its Driver before.
func ExampleDriver_Resume() {
	ctx := context.Background()
	// Each process has its own etcd client and Driver.
	client := func() *etcdlock.Client {
		cli, _ := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}, Logger: zap.NewNop()})
		c, _ := etcdlock.New(cli)
		return c
	}
	lease, err := client().TryLock(ctx, "jobs:42")
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
	fmt.Println("unlock:", held.Unlock(ctx))
	_, err = worker.Resume(ctx, ref)
	fmt.Println(errors.Is(err, dlock.ErrNotHeld))
	// It prints:
	// jobs:42 true
	// unlock: <nil>
	// true
}

func ExampleDriver_TTLLimits() {
	d, _ := etcdlock.NewDriver(&clientv3.Client{})
	lim := d.TTLLimits()
	ttl, _ := lim.Normalize(1500 * time.Millisecond)
	fmt.Println(lim.Min, lim.Step, ttl)
	// Output: 1s 1s 2s
}
