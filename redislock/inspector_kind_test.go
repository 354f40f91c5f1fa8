package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/redislock"
)

// TestInspectorNamesKinds: the Inspector tells every kind of lock from what
// the store holds, without being told, and each Client names its own kind.
func TestInspectorNamesKinds(t *testing.T) {
	ctx := context.Background()
	rdb := newRDB(t, srv.Addr)
	base := dlocktest.Key(t)
	in, err := redislock.NewInspector(rdb)
	if err != nil {
		t.Fatal(err)
	}
	re, err := redislock.NewReentrant(rdb)
	if err != nil {
		t.Fatal(err)
	}
	fair, _ := counted(t, true)
	rw := newRWMutex(t, rdb)
	clients := map[string]*redislock.Client{
		driver.KindMutex:     newClient(t),
		driver.KindReentrant: re,
		driver.KindSemaphore: newSemaphore(t, rdb, 3),
		driver.KindReadWrite: rw.RLocker(),
		driver.KindFair:      fair,
	}
	for kind, c := range clients {
		l, err := c.TryLock(ctx, base+"."+kind, dlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		defer l.Unlock(ctx)
	}
	// A fair lock differs from a plain one while waiters queue.
	waitCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	other, _ := counted(t, true)
	waited := make(chan error, 1)
	go func() {
		_, err := other.Lock(waitCtx, base+"."+driver.KindFair)
		waited <- err
	}()
	eventually(t, "a queued fair waiter", func() bool {
		info, err := fair.Inspect(ctx, base+"."+driver.KindFair)
		return err == nil && info.Waiters == 1
	})
	for kind, c := range clients {
		key := base + "." + kind
		if info, err := in.Inspect(ctx, key); err != nil || info.Kind != kind {
			t.Errorf("Inspector.Inspect(%s): kind %q, %v", key, info.Kind, err)
		}
		if info, err := c.Inspect(ctx, key); err != nil || info.Kind != kind {
			t.Errorf("Client.Inspect(%s): kind %q, %v", key, info.Kind, err)
		}
	}
	infos, err := driver.List(ctx, in, base+".*")
	if err != nil || len(infos) != len(clients) {
		t.Fatalf("List: %+v, %v", infos, err)
	}
	for _, info := range infos {
		if info.Kind != info.Key[len(base)+1:] {
			t.Errorf("List: %s has kind %q", info.Key, info.Kind)
		}
	}
	cancel()
	if err := <-waited; !errors.Is(err, context.Canceled) {
		t.Errorf("the fair waiter: %v", err)
	}

	// Foreign data is named with its Redis key and type.
	foreign := base + ".foreign"
	if err := rdb.RPush(ctx, redislock.FenceKey(foreign), "x").Err(); err != nil {
		t.Fatal(err)
	}
	defer rdb.Del(ctx, redislock.FenceKey(foreign))
	_, err = in.Inspect(ctx, foreign)
	var fd *redislock.ForeignDataError
	if !errors.As(err, &fd) || !errors.Is(err, dlock.ErrConflict) || fd.RedisKey != redislock.FenceKey(foreign) || fd.Type != "list" {
		t.Errorf("Inspect of a foreign fence counter: %v", err)
	}
}

// TestInspectorForcesFairLockToItsHead: the Inspector's ForceUnlock of a fair
// lock with queued waiters hands it to the head of the queue, as the holder's
// release would, rather than freeing it for anybody.
func TestInspectorForcesFairLockToItsHead(t *testing.T) {
	ctx, key, _ := held(t, true, time.Minute)
	in, err := redislock.NewInspector(newRDB(t, srv.Addr))
	if err != nil {
		t.Fatal(err)
	}
	probe := newRDB(t, srv.Addr)
	waiter, _ := counted(t, true)
	got := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		l, err := waiter.Lock(ctx, key, dlock.WithTTL(time.Minute))
		if err == nil {
			<-done // hold it while the newcomer tries
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	eventually(t, "waiter queued", func() bool { return probe.LLen(ctx, redislock.QueueKey(key)).Val() == 1 })
	if info, err := in.ForceUnlock(ctx, key); err != nil || info.Kind != driver.KindFair {
		t.Fatalf("ForceUnlock: %+v, %v", info, err)
	}
	if _, err := newClient(t).TryLock(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
		t.Errorf("a newcomer's TryLock right after ForceUnlock: %v, want the lock handed to the queued waiter", err)
	}
	close(done)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}
