package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// token is a FenceToken carried without a Lease, as a worker receives it.
type token struct {
	key string
	val uint64
}

func (t token) Key() string   { return t.key }
func (t token) Token() uint64 { return t.val }

func newFence(t *testing.T, rdb redis.UniversalClient) *redislock.Fence {
	t.Helper()
	f, err := redislock.NewFence(rdb)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestFenceRejectsStaleTokens(t *testing.T) {
	ctx := context.Background()
	rdb := newRDB(t, srv.Addr)
	f := newFence(t, rdb)
	lock := dlocktest.Key(t)
	res := "fenced:" + lock
	t.Cleanup(func() { rdb.Del(ctx, res) })

	// Integer order, not string order: "10" > "9".
	if err := f.Set(ctx, token{lock, 9}, res, "nine", 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Set(ctx, token{lock, 10}, res, "ten", 0); err != nil {
		t.Fatalf("newer token 10 after 9: %v", err)
	}
	if err := f.Set(ctx, token{lock, 10}, res, "ten again", 0); err != nil {
		t.Fatalf("same token twice: %v", err)
	}
	stale := token{lock, 9}
	if err := f.Set(ctx, stale, res, "stale", 0); !errors.Is(err, dlock.ErrStaleToken) {
		t.Fatalf("Set with stale token = %v, want ErrStaleToken", err)
	}
	if _, err := f.IncrBy(ctx, stale, res, 1); !errors.Is(err, dlock.ErrStaleToken) {
		t.Fatalf("IncrBy with stale token = %v, want ErrStaleToken", err)
	}
	if _, err := f.Del(ctx, stale, res); !errors.Is(err, dlock.ErrStaleToken) {
		t.Fatalf("Del with stale token = %v, want ErrStaleToken", err)
	}
	if v := rdb.Get(ctx, res).Val(); v != "ten again" {
		t.Fatalf("resource = %q after stale writes, want unchanged", v)
	}
	if l, tok, err := f.Newest(ctx, res); err != nil || l != lock || tok != 10 {
		t.Fatalf("Newest = %q %d %v, want %q 10", l, tok, err, lock)
	}

	// Tokens beyond 2^53 still compare exactly.
	big := uint64(math.MaxUint64 - 1)
	if err := f.Set(ctx, token{lock, big}, res, "big", 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Set(ctx, token{lock, big - 1}, res, "big-1", 0); !errors.Is(err, dlock.ErrStaleToken) {
		t.Fatalf("token 2^64-3 after 2^64-2 = %v, want ErrStaleToken", err)
	}

	// Delete keeps the record: a stale holder cannot re-create the resource.
	if ok, err := f.Del(ctx, token{lock, big}, res); err != nil || !ok {
		t.Fatalf("Del = %v %v", ok, err)
	}
	if _, err := f.IncrBy(ctx, token{lock, 10}, res, 1); !errors.Is(err, dlock.ErrStaleToken) {
		t.Fatalf("IncrBy after Del with an older token = %v, want ErrStaleToken", err)
	}
	if n := rdb.Exists(ctx, res).Val(); n != 0 {
		t.Fatal("stale IncrBy re-created the deleted resource")
	}
}

func TestFenceWithLeases(t *testing.T) {
	ctx := context.Background()
	rdb := newRDB(t, srv.Addr)
	c := newClient(t)
	f := newFence(t, rdb)
	key := dlocktest.Key(t)
	res := "counter:" + key
	t.Cleanup(func() { rdb.Del(ctx, res) })

	old, err := c.TryLock(ctx, key, dlock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := f.IncrBy(ctx, old, res, 1); err != nil || n != 1 {
		t.Fatalf("IncrBy = %d %v", n, err)
	}
	<-old.Done() // expired: the next holder takes over
	cur, err := c.Lock(ctx, key, dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cur.Unlock(ctx)
	if n, err := f.IncrBy(ctx, cur, res, 1); err != nil || n != 2 {
		t.Fatalf("IncrBy by the new holder = %d %v", n, err)
	}
	if _, err := f.IncrBy(ctx, old, res, 1); !errors.Is(err, dlock.ErrStaleToken) {
		t.Fatalf("IncrBy by the expired holder = %v, want ErrStaleToken", err)
	}

	// A token of another lock is refused, whatever its value.
	other, err := c.TryLock(ctx, key+":other", dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Unlock(ctx)
	if other.Token() <= cur.Token() {
		t.Fatalf("tokens %d then %d: want the later acquisition larger", cur.Token(), other.Token())
	}
	_, err = f.IncrBy(ctx, other, res, 1)
	if !errors.Is(err, redislock.ErrForeignFence) || !errors.Is(err, dlock.ErrConflict) {
		t.Fatalf("IncrBy with another lock's token = %v, want ErrForeignFence and ErrConflict", err)
	}
	if v, _ := rdb.Get(ctx, res).Int(); v != 2 {
		t.Fatalf("counter = %d, want 2", v)
	}
}

func TestFenceBadInput(t *testing.T) {
	ctx := context.Background()
	rdb := newRDB(t, srv.Addr)
	f := newFence(t, rdb)
	lock := dlocktest.Key(t)
	var nilLease *dlock.Lease
	var nilCtx context.Context
	cases := []struct {
		name string
		ctx  context.Context
		tok  redislock.FenceToken
		res  string
	}{
		{"zero token", ctx, token{lock, 0}, "r"},
		{"missing token", ctx, nil, "r"},
		{"nil lease", ctx, nilLease, "r"},
		{"empty lock key", ctx, token{"", 1}, "r"},
		{"empty resource", ctx, token{lock, 1}, ""},
		{"resource under the lock prefix", ctx, token{lock, 1}, redislock.LockKey(lock)},
		{"resource with } and no hash tag", ctx, token{lock, 1}, "a}b"},
		{"nil context", nilCtx, token{lock, 1}, "r"},
	}
	for _, c := range cases {
		if err := f.Set(c.ctx, c.tok, c.res, "v", 0); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("%s: Set = %v, want ErrInvalid", c.name, err)
		}
	}
	if err := f.Set(ctx, token{lock, 1}, "r", "v", -time.Second); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("negative ttl: %v, want ErrInvalid", err)
	}
	if _, err := redislock.NewFence(nil); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("NewFence(nil) = %v, want ErrInvalid", err)
	}

	res := "notanumber:" + lock
	rdb.Set(ctx, res, "x", time.Minute)
	if _, err := f.IncrBy(ctx, token{lock, 1}, res, 1); !errors.Is(err, dlock.ErrConflict) {
		t.Errorf("IncrBy on a string = %v, want ErrConflict", err)
	}
	if _, tok, _ := f.Newest(ctx, res); tok != 0 {
		t.Errorf("failed IncrBy recorded token %d", tok)
	}
	list := "list:" + lock
	rdb.RPush(ctx, list, "a")
	rdb.Expire(ctx, list, time.Minute)
	if _, err := f.IncrBy(ctx, token{lock, 1}, list, 1); !errors.Is(err, dlock.ErrConflict) {
		t.Errorf("IncrBy on a list = %v, want ErrConflict", err)
	}
}

func TestFenceRecordLifetimeAndSlot(t *testing.T) {
	for _, c := range []struct{ res, rec string }{
		{"plain", "dlock:fenced:{plain}"},
		{"user:{42}:balance", "dlock:fenced:{42}:user:{42}:balance"},
		{"a{b", "dlock:fenced:{a{b}"},
	} {
		if got, err := redislock.FenceRecordKey(c.res); err != nil || got != c.rec {
			t.Errorf("FenceRecordKey(%q) = %q %v, want %q", c.res, got, err, c.rec)
		}
	}
	ctx := context.Background()
	rdb := newRDB(t, srv.Addr)
	f := newFence(t, rdb)
	lock := dlocktest.Key(t)
	res := "life:" + lock
	rec, _ := redislock.FenceRecordKey(res)
	t.Cleanup(func() { rdb.Del(ctx, res, rec) })
	if err := f.Set(ctx, token{lock, 5}, res, "v", time.Second); err != nil {
		t.Fatal(err)
	}
	if ttl := rdb.PTTL(ctx, rec).Val(); ttl <= redislock.FenceRetention-time.Minute || ttl > redislock.FenceRetention {
		t.Fatalf("record PTTL %v, want about FenceRetention %v", ttl, redislock.FenceRetention)
	}
	long := 2 * redislock.FenceRetention
	if err := f.Set(ctx, token{lock, 6}, res, "v", long); err != nil {
		t.Fatal(err)
	}
	if ttl := rdb.PTTL(ctx, rec).Val(); ttl <= long-time.Minute {
		t.Fatalf("record PTTL %v shorter than the resource's %v", ttl, long)
	}
}

// TestFenceCluster runs fenced writes through a Redis Cluster client: the record
// and the resource share a slot (a CROSSSLOT error would fail the test).
func TestFenceCluster(t *testing.T) {
	cluster := testserver.StartCluster(t, 3)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	f := newFence(t, rdb)
	ctx := context.Background()
	for i, res := range []string{"a", "b", "c", "user:{7}:x", "{z}", "d{e"} {
		if n, err := f.IncrBy(ctx, token{"L", uint64(10 + i)}, res, 1); err != nil || n != 1 {
			t.Fatalf("IncrBy %q = %d %v", res, n, err)
		}
		if _, err := f.IncrBy(ctx, token{"L", 5}, res, 1); !errors.Is(err, dlock.ErrStaleToken) {
			t.Fatalf("stale IncrBy %q = %v", res, err)
		}
	}
}

// staleRecorder records the stale-token events an Observer receives.
type staleRecorder struct {
	dlock.NopObserver
	mu     sync.Mutex
	events []dlock.StaleTokenEvent
}

func (s *staleRecorder) StaleToken(_ context.Context, e dlock.StaleTokenEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, e)
}

// TestFenceReportsStaleTokens: a write refused as stale is told to the
// Observer of the lease that made it, with the newer token.
func TestFenceReportsStaleTokens(t *testing.T) {
	ctx := context.Background()
	rdb := newRDB(t, srv.Addr)
	f := newFence(t, rdb)
	obs := &staleRecorder{}
	c := newClient(t, dlock.WithObserver(obs), dlock.WithTTL(10*time.Second))
	key := dlocktest.Key(t)
	res := "fenced:" + key
	t.Cleanup(func() { rdb.Del(ctx, res) })
	old, cur := dlocktest.Superseded(t, c, key)
	if err := f.Set(ctx, cur, res, "new", 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Set(ctx, old, res, "old", 0); !errors.Is(err, dlock.ErrStaleToken) {
		t.Fatalf("Set with the old lease: %v, want ErrStaleToken", err)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	want := []dlock.StaleTokenEvent{{Target: dlock.Target{Key: key, Backend: "redislock", Kind: driver.KindMutex},
		Resource: res, Token: old.Token(), Newest: cur.Token()}}
	if fmt.Sprint(obs.events) != fmt.Sprint(want) {
		t.Errorf("events %+v, want %+v", obs.events, want)
	}
}
