package natslock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/driver"
)

// newFair returns a FairDriver over a connection of its own to the single
// server, its bucket migrated, and a Client over it.
func newFair(t testing.TB, opts ...dlock.Option) (*Client, *FairDriver) {
	t.Helper()
	f, err := NewFairDriver(connect(t, srv.URL))
	return clientOver(t, f, err, opts...), f
}

// queueDriver is a driver of queues: a FairDriver or a SemaphoreDriver.
type queueDriver interface {
	driver.Driver
	Migrate(context.Context) error
	Close()
}

// clientOver migrates the bucket of d (made with err) and returns a Client
// over it; d is closed when the test ends.
func clientOver(t testing.TB, d queueDriver, err error, opts ...dlock.Option) *Client {
	t.Helper()
	if err == nil {
		err = d.Migrate(ctxT(t, 10*time.Second))
	}
	var c *Client
	if err == nil {
		t.Cleanup(d.Close)
		c, err = dlock.NewClient(d, opts...)
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// fairLocker is newFair's Client alone.
func fairLocker(t testing.TB, opts ...dlock.Option) dlock.Locker {
	c, _ := newFair(t, opts...)
	return c
}

func TestFairConformance(t *testing.T) {
	dlocktest.Run(t, dlocktest.Backend{
		Info: driver.DriverInfo{Backend: "natslock", Kind: driver.KindFair},
		New:  fairLocker,
		Occupy: func(t testing.TB, key string) func() bool {
			js := connect(t, srv.URL)
			kv, err := js.KeyValue(ctxT(t, 10*time.Second), DefaultFairBucket)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := kv.Put(ctxT(t, 10*time.Second), key+".foreign", []byte("user data")); err != nil {
				t.Fatal(err)
			}
			return func() bool {
				e, err := kv.Get(ctxT(t, 10*time.Second), key+".foreign")
				return err == nil && string(e.Value()) == "user data"
			}
		},
	})
}

// fairHeld takes a fair lock of its own for 30 s, and returns its key, a
// context for the test, a FairDriver and the lease.
func fairHeld(t *testing.T) (string, context.Context, *FairDriver, *dlock.Lease) {
	t.Helper()
	key := dlocktest.Key(t)
	ctx := ctxT(t, 60*time.Second)
	c, f := newFair(t)
	held, err := c.TryLock(ctx, key, dlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return key, ctx, f, held
}

// Waiters in separate processes are granted the lock in the order they
// queued, with increasing tokens, and a TryLock does not pass them.
func TestFairGrantsInQueueOrder(t *testing.T) {
	key, ctx, f, held := fairHeld(t)
	const n = 4
	type got struct {
		who   int
		token uint64
	}
	grants := make(chan got, n)
	release := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		c, _ := newFair(t)
		wg.Go(func() {
			lease, err := c.Lock(ctx, key, dlock.WithTTL(20*time.Second))
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			grants <- got{i, lease.Token()}
			<-release
			if err := lease.Unlock(ctx); err != nil {
				t.Errorf("waiter %d: unlock: %v", i, err)
			}
		})
		dlocktest.Queued(t, f, key, i+1)
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	g := <-grants
	late, _ := newFair(t)
	if _, err := late.TryLock(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
		t.Errorf("TryLock while waiters queue: %v, want ErrNotObtained", err)
	}
	prev := held.Token()
	for i := range n {
		if i > 0 {
			g = <-grants
		}
		if g.who != i || g.token <= prev {
			t.Fatalf("grant %d went to waiter %d with token %d (the previous %d)", i, g.who, g.token, prev)
		}
		prev = g.token
		release <- struct{}{}
	}
	wg.Wait()
	if info, err := f.Inspect(ctx, key); err != nil || info.Held || info.Waiters != 0 {
		t.Fatalf("after every waiter: %+v, %v", info, err)
	}
}

// A hand-over costs the holder's release alone: the next holder, woken in its
// own process, writes nothing to be granted the lock, and no other waiter
// writes anything either.
func TestFairHandOverIsOneWrite(t *testing.T) {
	key, ctx, f, held := fairHeld(t)
	granted := make(chan *dlock.Lease, 3)
	for i := range 3 {
		c, _ := newFair(t)
		go func() {
			lease, err := c.Lock(ctx, key, dlock.WithTTL(30*time.Second))
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
			}
			granted <- lease
		}()
		dlocktest.Queued(t, f, key, i+1)
	}
	b, err := f.d.openBucket(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lastSeq := func() uint64 {
		info, err := b.stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.LastSeq
	}
	before := lastSeq()
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	next := <-granted
	if next == nil {
		t.FailNow()
	}
	if n := lastSeq() - before; n != 1 {
		t.Errorf("%d writes to the bucket from the release to the next grant, want 1", n)
	}
	for i := range 3 {
		if i > 0 {
			if next = <-granted; next == nil {
				t.FailNow()
			}
		}
		if err := next.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A Lock that gives up (its context ends) leaves nothing in the queue, and a
// waiter whose process stopped leaves it when its entry's TTL runs out: the
// one behind it is then granted the lock.
func TestFairWaitersThatGiveUpOrStop(t *testing.T) {
	key, ctx, f, held := fairHeld(t)
	quitter, _ := newFair(t)
	qctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := quitter.Lock(qctx, key)
	cancel()
	if !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("Lock that ran out of time: %v", err)
	}
	dlocktest.Queued(t, f, key, 0)
	// A waiter that queued and stopped: one attempt of a Driver, never
	// followed by another.
	stopped, _ := newFair(t)
	_, err = stopped.Driver().Acquire(ctx, driver.AcquireRequest{Key: key, Owner: "stopped", TTL: 4 * time.Second, Waiting: true})
	if !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("the stopped waiter's attempt: %v", err)
	}
	dlocktest.Queued(t, f, key, 1)
	behind, _ := newFair(t)
	got := make(chan error, 1)
	go func() {
		lease, err := behind.Lock(ctx, key, dlock.WithTTL(10*time.Second))
		if err == nil {
			err = lease.Unlock(ctx)
		}
		got <- err
	}()
	dlocktest.Queued(t, f, key, 2)
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the waiter behind a stopped one was not granted the lock when its entry expired")
	}
}

// An abandoned acquisition whose first write may still be on its way leaves
// a marker that refuses that write for DefaultMarkerTTL, not only for the
// second that a release's marker stays: a late write would otherwise queue an
// entry that nobody renews, in the way of every waiter until its TTL.
func TestFairAbandonRefusesALateWrite(t *testing.T) {
	key := dlocktest.Key(t)
	ctx := ctxT(t, 30*time.Second)
	_, f := newFair(t)
	if _, err := f.d.open(ctx, key); err != nil {
		t.Fatal(err)
	}
	qe := f.d.pendingEntry(key, "late") // as an attempt whose reply was lost makes it
	if err := f.Abandon(ctx, driver.Holding{Key: key, Owner: "late"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(releasedTTL + 1500*time.Millisecond) // past a release marker's life
	_, err := f.d.publish(ctx, f.d.pre+qe.subject(), []byte(`{"owner":"late"}`), 0, 10*time.Second)
	if !wrongLast(err) {
		t.Fatalf("a late first write after the abandon: %v, want refused", err)
	}
}
