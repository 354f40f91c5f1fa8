package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"
)

// counted is a Driver that counts acquisition attempts.
type counted struct {
	*Driver
	attempts atomic.Int64
}

func (c *counted) Acquire(ctx context.Context, r driver.AcquireRequest) (driver.Grant, error) {
	c.attempts.Add(1)
	return c.Driver.Acquire(ctx, r)
}

// queuedWatch returns a function that waits until the next entry is written to
// the queue of key.
func queuedWatch(t *testing.T, ctx context.Context, cli *clientv3.Client, key string) func() {
	wch := cli.Watch(ctx, QueuePrefix(key), clientv3.WithPrefix(), clientv3.WithFilterDelete())
	return func() {
		t.Helper()
		for {
			select {
			case wr := <-wch:
				if err := wr.Err(); err != nil {
					t.Fatal(err)
				}
				for _, ev := range wr.Events {
					if ev.IsCreate() {
						return
					}
				}
			case <-ctx.Done():
				t.Fatal("no waiter queued")
			}
		}
	}
}

// TestLockWaitersTakeTurnsWithoutHerd queues waiting Lock calls, each through a
// Client and connection of its own, and releases the lock: every waiter gets
// it in queue order after exactly two attempts (the one that queued it and the
// one its wake-up triggered) and one wake-up, however many wait behind it.
func TestLockWaitersTakeTurnsWithoutHerd(t *testing.T) {
	const waiters = 4
	key := testKey(t)
	ctx := ctxT(t, 30*time.Second)
	holder := newClient(t)
	lease, err := holder.TryLock(ctx, key, dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	next := queuedWatch(t, ctx, newEtcd(t), key)
	drivers := make([]*counted, waiters)
	order := make(chan int, waiters)
	g, gctx := errgroup.WithContext(ctx)
	for i := range drivers {
		d := &counted{Driver: newDriver(t)}
		drivers[i] = d
		c, err := dlock.NewClient(d, dlock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		g.Go(func() error {
			l, err := c.Lock(gctx, key)
			if err != nil {
				return fmt.Errorf("waiter %d: %w", i, err)
			}
			order <- i
			return l.Unlock(gctx)
		})
		next() // queued: the next waiter queues behind it
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	close(order)
	turn := 0
	for i := range order {
		if i != turn {
			t.Errorf("waiter %d took turn %d", i, turn)
		}
		turn++
	}
	for i, d := range drivers {
		if n, w := d.attempts.Load(), d.wakes.Load(); n != 2 || w != 1 {
			t.Errorf("waiter %d: %d attempts and %d wake-ups, want 2 and 1", i, n, w)
		}
	}
}

// TestLockGiveUpLeavesNoEntry: a waiting Lock that gives up (its wait ends)
// removes its entry at once, and the waiter behind it moves up.
func TestLockGiveUpLeavesNoEntry(t *testing.T) {
	key := testKey(t)
	ctx := ctxT(t, 30*time.Second)
	cli := newEtcd(t)
	holder := newClient(t)
	lease, err := holder.TryLock(ctx, key, dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = newClient(t).Lock(ctx, key, dlock.WithWait(300*time.Millisecond))
	if !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("Lock with a short wait: %v", err)
	}
	if got := entries(t, cli, key); len(got) != 1 || got[0] != lease.Owner() {
		t.Fatalf("entries %v %v after the give-up, want the holder's alone", got, time.Since(start))
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
