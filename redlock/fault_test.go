package redlock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// TestRestartWithoutPersistenceBreaksExclusion shows Redlock's known hole: a
// node of the holder's majority restarts empty, and another client gathers a
// new majority at once, while the first still holds its lease (until its
// loss subscription, back on the restarted node, tells it). The new holder's
// token is greater, so a resource that checks tokens refuses the old holder's
// write.
func TestRestartWithoutPersistenceBreaksExclusion(t *testing.T) {
	key := dlocktest.Key(t)
	ctx := ctxT(t, 20*time.Second)
	a, b := newClient(t), newClient(t)
	stop(t, 3, 4)
	la, err := a.TryLock(ctx, key, dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatalf("TryLock on nodes 0-2: %v", err)
	}
	start(t, 3)
	start(t, 4)
	if err := srvs[2].Restart(); err != nil { // no persistence: the holding is gone
		t.Fatal(err)
	}
	lb, err := b.TryLock(ctx, key, dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatalf("TryLock after the restart: %v (the hole did not open)", err)
	}
	if lb.Err() != nil {
		t.Fatalf("the new holder's lease: %v", lb.Err())
	}
	if err := la.Err(); err != nil {
		// The old holder may already be told: its loss subscription to the
		// restarted node checked its holding there when it subscribed again.
		// Until then both held the lock.
		if !errors.Is(err, dlock.ErrLockLost) {
			t.Fatalf("the old holder's lease: %v, not a loss", err)
		}
		t.Logf("the old holder was told: %v", err)
	}
	t.Logf("two holders: token %d (nodes 0,1) and token %d (nodes 2,3,4)", la.Token(), lb.Token())
	if lb.Token() <= la.Token() {
		t.Fatalf("new holder's token %d not above the old one's %d", lb.Token(), la.Token())
	}

	// Fencing: the resource refuses the old holder's write once the new one wrote.
	f, err := redislock.NewFence(newRDB(t, srvs[0].Addr))
	if err != nil {
		t.Fatal(err)
	}
	resource := key + ":resource"
	t.Cleanup(func() {
		rdb := newRDB(t, srvs[0].Addr)
		rk, _ := redislock.FenceRecordKey(resource)
		rdb.Del(context.Background(), resource, rk)
	})
	if err := f.Set(ctx, lb, resource, "b", 0); err != nil {
		t.Fatalf("new holder's fenced write: %v", err)
	}
	if err := f.Set(ctx, la, resource, "a", 0); !errors.Is(err, dlock.ErrStaleToken) {
		t.Fatalf("old holder's fenced write: %v, want ErrStaleToken", err)
	}
	_ = la.Unlock(ctx) // nodes 0 and 1 only: a majority holds it for b
	if err := lb.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestDelayedRestartKeepsExclusion is the mitigation: a node that crashed stays
// down for longer than the longest TTL, so that every holding it knew of has
// expired when it comes back. Meanwhile the lock cannot be taken by anybody else.
func TestDelayedRestartKeepsExclusion(t *testing.T) {
	key := dlocktest.Key(t)
	ctx := ctxT(t, 20*time.Second)
	a, b := newClient(t), newClient(t)
	// Long enough for the restarts below on a loaded host: the holder's
	// lease must still be valid when the other Client tries.
	const ttl = 2 * time.Second
	stop(t, 3, 4)
	la, err := a.TryLock(ctx, key, dlock.WithTTL(ttl))
	if err != nil {
		t.Fatalf("TryLock on nodes 0-2: %v", err)
	}
	acquired := time.Now()
	start(t, 3)
	start(t, 4)
	stop(t, 2) // crashed, kept down for longer than the TTL
	if _, err := b.TryLock(ctx, key); err == nil {
		t.Fatal("TryLock succeeded while the holder's majority was only partly down")
	}
	<-la.Done() // the holder's lease ends first...
	if wait := ttl + 50*time.Millisecond - time.Since(acquired); wait > 0 {
		time.Sleep(wait) // ...and node 2 stays down past the TTL: the delayed restart itself
	}
	start(t, 2)
	lb, err := b.Lock(ctx, key, dlock.WithWait(5*time.Second))
	if err != nil {
		t.Fatalf("Lock after the delayed restart: %v", err)
	}
	if lb.Token() <= la.Token() {
		t.Errorf("token %d after %d", lb.Token(), la.Token())
	}
	if err := lb.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestTokensIncreaseWithoutSharedClock: tokens are drawn from each node's clock,
// and one node may run far ahead of the others. The acquisition that drew its
// token there records it on its majority, so the next acquisition, on a majority
// without that node, still draws a greater token.
func TestTokensIncreaseWithoutSharedClock(t *testing.T) {
	key := dlocktest.Key(t)
	ctx := ctxT(t, 20*time.Second)
	const ahead = 9_000_000_000_000_000 // microseconds: a clock centuries ahead
	fast := newRDB(t, srvs[0].Addr)
	if err := fast.Set(ctx, redislock.FenceKey(key), strconv.FormatUint(ahead, 10), time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	c := newClient(t)
	stop(t, 3, 4)
	la, err := c.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if la.Token() <= ahead {
		t.Fatalf("token %d not above node 0's counter %d", la.Token(), uint64(ahead))
	}
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	start(t, 3)
	start(t, 4)
	stop(t, 0)
	lb, err := c.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if lb.Token() <= la.Token() {
		t.Fatalf("token %d on a majority without the fast node, not above %d", lb.Token(), la.Token())
	}
	info, err := c.Inspect(ctx, key)
	if err != nil || info.Token != lb.Token() || info.Owner != lb.Owner() {
		t.Errorf("Inspect: %+v, %v; want token %d", info, err, lb.Token())
	}
	if err := lb.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestWaiterWokenOnRelease: a waiter sleeps on the holder's long TTL and is
// woken by the release, on whichever node's message comes first.
func TestWaiterWokenOnRelease(t *testing.T) {
	key := dlocktest.Key(t)
	ctx := ctxT(t, 20*time.Second)
	holder, waiter := newClient(t), newClient(t)
	stop(t, 1) // notifications need no more than a majority either
	la, err := holder.TryLock(ctx, key, dlock.WithTTL(15*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	var lb *dlock.Lease
	go func() {
		var err error
		lb, err = waiter.Lock(ctx, key, dlock.WithRetry(dlock.FixedBackoff(10*time.Second)))
		got <- err
	}()
	// The waiter's first attempt marks the holding on the nodes it reached.
	probes := []*redis.Client{newRDB(t, srvs[0].Addr), newRDB(t, srvs[2].Addr), newRDB(t, srvs[3].Addr), newRDB(t, srvs[4].Addr)}
	for i := 0; ; i++ {
		if marked(key, probes) >= 3 {
			break
		}
		if i == 1000 {
			t.Fatal("the waiter never marked the holding")
		}
		time.Sleep(5 * time.Millisecond)
	}
	released := time.Now()
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiter not woken by the release")
	}
	if el := time.Since(released); el > 2*time.Second {
		t.Errorf("waiter took the lock %v after the release", el)
	}
	if err := lb.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// marked counts the nodes on which key's holding is marked as waited for.
func marked(key string, nodes []*redis.Client) int {
	n := 0
	for _, rdb := range nodes {
		// The plain lock record starts with '+' when marked (see redislock).
		if strings.HasPrefix(rdb.Get(context.Background(), redislock.LockKey(key)).Val(), "+") {
			n++
		}
	}
	return n
}

// TestTokenAboveGrantLostInACrash: every node crashes and comes back from a save
// taken before the last grant (so each remembers the release before it); the
// next grant still draws a token above the lost one.
func TestTokenAboveGrantLostInACrash(t *testing.T) {
	var servers []*testserver.Redis
	var at []string
	for range 3 {
		s := testserver.StartRedis(t, "--save", "3600 1")
		servers = append(servers, s)
		at = append(at, s.Addr)
	}
	c := newClientAt(t, at, nil)
	ctx := ctxT(t, 20*time.Second)
	key := dlocktest.Key(t)
	l, err := c.TryLock(ctx, key, dlock.WithTTL(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range servers {
		// Every node's release has landed once the record is the token alone.
		rdb := newRDB(t, s.Addr)
		testserver.Eventually(t, 5*time.Second, "the release on "+s.Addr, func() bool {
			return rdb.StrLen(ctx, redislock.LockKey(key)).Val() <= 16
		})
		if err := rdb.Save(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	la, err := c.TryLock(ctx, key, dlock.WithTTL(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range servers {
		if err := s.Restart(); err != nil { // SIGKILL: the grant is lost everywhere
			t.Fatal(err)
		}
	}
	lb, err := newClientAt(t, at, nil).TryLock(ctx, key, dlock.WithTTL(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	_ = la.Unlock(ctx)
	if err := lb.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if lb.Token() <= la.Token() {
		t.Fatalf("token %d after the crash, not above the lost grant's %d", lb.Token(), la.Token())
	}
}
