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

func ExampleDriver_TTLLimits() {
	d, _ := etcdlock.NewDriver(&clientv3.Client{})
	lim := d.TTLLimits()
	ttl, _ := lim.Normalize(1500 * time.Millisecond)
	fmt.Println(lim.Min, lim.Step, ttl)
	// Output: 1s 1s 2s
}
