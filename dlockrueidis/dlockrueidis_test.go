package dlockrueidis_test

import (
	"context"
	"errors"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockrueidis"
	"github.com/dlock-go/dlock/dlockrueidis/dlockvalkey"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/valkey-io/valkey-go"
)

var srv *testserver.Redis

func TestMain(m *testing.M) {
	os.Exit(testserver.Main(m, func(r *testserver.Redis) { srv = r }))
}

// pushBound is how soon a pushed loss must close a lease's Done: far below
// the renewal interval of dlocktest.PushedTTL.
const pushBound = 2 * time.Second

func rueidisClient(t testing.TB, addrs ...string) rueidis.Client {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func valkeyClient(t testing.TB, addrs ...string) valkey.Client {
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: addrs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// occupy is the conformance suite's Occupy on the server at addr: a list
// where the lock's record would be.
func occupy(addr string) func(t testing.TB, key string) func() bool {
	return func(t testing.TB, key string) func() bool {
		rdb := testserver.RedisClient(t, addr)
		k := redislock.LockKey(key)
		if err := rdb.RPush(context.Background(), k, "a", "b").Err(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rdb.Del(context.Background(), k) })
		return func() bool {
			v, err := rdb.LRange(context.Background(), k, 0, -1).Result()
			return err == nil && len(v) == 2 && rdb.PTTL(context.Background(), k).Val() == -1
		}
	}
}

func newRueidis(t testing.TB, addr string, opts ...dlock.Option) *dlock.Client {
	c, err := dlockrueidis.New(rueidisClient(t, addr), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newValkey(t testing.TB, addr string, opts ...dlock.Option) *dlock.Client {
	c, err := dlockvalkey.New(valkeyClient(t, addr), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var info = driver.DriverInfo{Backend: "redislock", Kind: driver.KindMutex}

func TestConformanceRueidis(t *testing.T) {
	dlocktest.Run(t, dlocktest.Backend{
		Info:   info,
		New:    func(t testing.TB, opts ...dlock.Option) dlock.Locker { return newRueidis(t, srv.Addr, opts...) },
		Occupy: occupy(srv.Addr),
	})
}

// TestConformanceValkey runs the suite over valkey-go against valkey-server.
func TestConformanceValkey(t *testing.T) {
	bin, err := testserver.ValkeyBinary()
	if err != nil {
		t.Fatal(err)
	}
	vs := testserver.StartRedisBinary(t, bin)
	dlocktest.Run(t, dlocktest.Backend{
		Info:   info,
		New:    func(t testing.TB, opts ...dlock.Option) dlock.Locker { return newValkey(t, vs.Addr, opts...) },
		Occupy: occupy(vs.Addr),
	})
}

// lossSubscribed waits until a Client listens for pushed losses on the server
// behind admin, with the keyspace pattern too when pattern.
func lossSubscribed(t testing.TB, ctx context.Context, admin *redis.Client, pattern bool) {
	t.Helper()
	for range 400 {
		subs, _ := admin.PubSubNumSub(ctx, "dlock:lost").Result()
		pats, _ := admin.PubSubNumPat(ctx).Result()
		if subs["dlock:lost"] >= 1 && (!pattern || pats >= 1) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no loss subscription on the server")
}

// TestPushedLoss: a holder over rueidis or valkey-go is told at once of a
// force-unlock by an Inspector elsewhere, and of a deletion of its record
// (keyspace notifications).
func TestPushedLoss(t *testing.T) {
	own := testserver.StartRedis(t, "--notify-keyspace-events", "Kgxe")
	admin := testserver.RedisClient(t, own.Addr)
	in, err := redislock.NewInspector(admin)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*dlock.Client{"rueidis": newRueidis(t, own.Addr), "valkey-go": newValkey(t, own.Addr)} {
		t.Run(name+"/ForceUnlock", func(t *testing.T) {
			took := dlocktest.PushedLoss(t, c, dlocktest.Key(t), pushBound, func(ctx context.Context, l *dlock.Lease) (time.Time, error) {
				lossSubscribed(t, ctx, admin, false)
				start := time.Now()
				_, err := in.ForceUnlock(ctx, l.Key())
				return start, err
			})
			t.Logf("ForceUnlock to Done: %v", took)
		})
		t.Run(name+"/DEL", func(t *testing.T) {
			took := dlocktest.PushedLoss(t, c, dlocktest.Key(t), pushBound, func(ctx context.Context, l *dlock.Lease) (time.Time, error) {
				lossSubscribed(t, ctx, admin, true)
				start := time.Now()
				return start, admin.Del(ctx, redislock.LockKey(l.Key())).Err()
			})
			t.Logf("DEL to Done: %v", took)
		})
	}
}

// handOvers has g goroutines, each with a Client of its own made by mk, take
// key n times each, waiting, and reports how long it took; a waiter that
// missed its wake-up would sleep out the holder's TTL.
func handOvers(t *testing.T, mk func() *dlock.Client, keys []string, g, n int) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var (
		wg      sync.WaitGroup
		holders atomic.Int32
		failed  atomic.Value
	)
	start := time.Now()
	for i := range g {
		c := mk()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range n {
				key := keys[(i+j)%len(keys)]
				l, err := c.Lock(ctx, key, dlock.WithTTL(30*time.Second), dlock.WithWait(30*time.Second))
				if err != nil {
					failed.Store(err)
					return
				}
				if holders.Add(1) > int32(len(keys)) {
					failed.Store(errors.New("more holders than locks"))
				}
				time.Sleep(time.Millisecond)
				holders.Add(-1)
				if err := l.Unlock(ctx); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
	return time.Since(start)
}

// TestWaitersWokenRueidis: contended hand-overs over rueidis are woken by
// the release (a lost wake-up would cost the 30 s TTL).
func TestWaitersWokenRueidis(t *testing.T) {
	took := handOvers(t, func() *dlock.Client { return newRueidis(t, srv.Addr) }, []string{dlocktest.Key(t)}, 4, 10)
	if took > 15*time.Second {
		t.Fatalf("40 hand-overs took %v: waiters were not woken by the releases", took)
	}
}

// TestClusterRueidis: over a rueidis Cluster client, locks of keys in every
// slot are exclusive, and their waiters are woken by sharded pub/sub on the
// masters of their slots.
func TestClusterRueidis(t *testing.T) {
	t.Cleanup(awaitRueidisRefresh) // after the clients' Close
	cl := testserver.StartCluster(t, 3)
	keys := []string{dlocktest.Key(t) + "a", dlocktest.Key(t) + "b", dlocktest.Key(t) + "c", dlocktest.Key(t) + "d"}
	took := handOvers(t, func() *dlock.Client {
		c, err := dlockrueidis.New(rueidisClient(t, cl.Addrs()...))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}, keys, 4, 8)
	if took > 15*time.Second {
		t.Fatalf("32 hand-overs took %v: waiters were not woken by the releases", took)
	}
	// Listing the locks of a Cluster is not offered over a Transport.
	tr, err := dlockrueidis.Transport(rueidisClient(t, cl.Addrs()...), 0)
	if err != nil {
		t.Fatal(err)
	}
	d, err := redislock.NewDriverOver(tr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.ListPrefix(context.Background(), ""); !errors.Is(err, redislock.ErrTransportUnsupported) {
		t.Errorf("ListPrefix over a Cluster Transport: %v", err)
	}
}

// TestTransportLimits: what a Transport does not offer fails with
// ErrTransportUnsupported, and a nil client with ErrInvalid (see
// TestClusterRueidis for the listing of a Cluster's locks).
func TestTransportLimits(t *testing.T) {
	tr, err := dlockrueidis.Transport(rueidisClient(t, srv.Addr), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := redislock.NewDriverOver(tr, redislock.WithReplicaAck(1, time.Second)); !errors.Is(err, redislock.ErrTransportUnsupported) || !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("WithReplicaAck over a Transport: %v", err)
	}
	if _, err := dlockrueidis.New(nil); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("nil rueidis client: %v", err)
	}
	if _, err := dlockvalkey.New(nil); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("nil valkey client: %v", err)
	}
	if _, err := redislock.NewDriverOver(nil); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("nil Transport: %v", err)
	}
}

// TestFairRueidis: the fair lock over rueidis hands the lock to its waiters
// in arrival order.
func TestFairRueidis(t *testing.T) {
	tr, err := dlockrueidis.Transport(rueidisClient(t, srv.Addr), 0)
	if err != nil {
		t.Fatal(err)
	}
	d, err := redislock.NewFairDriverOver(tr)
	if err != nil {
		t.Fatal(err)
	}
	c, err := dlock.NewClient(d)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	key := dlocktest.Key(t)
	l, err := c.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	order := make(chan int, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, err := c.Lock(ctx, key, dlock.WithWait(20*time.Second))
			if err != nil {
				t.Error(err)
				return
			}
			order <- i
			_ = w.Unlock(ctx)
		}()
		// The next waiter queues after this one.
		testserver.Eventually(t, 5*time.Second, "the waiter queued", func() bool {
			info, err := d.Inspect(ctx, key)
			return err == nil && info.Waiters == i+1
		})
	}
	_ = l.Unlock(ctx)
	wg.Wait()
	close(order)
	want := 0
	for got := range order {
		if got != want {
			t.Fatalf("waiter %d got the lock in turn %d", got, want)
		}
		want++
	}
}

// TestWakeChannelsLeft: once the waiters of a key are gone, the Clients over
// rueidis leave its wake channels on the server too (a channel left
// subscribed would make a release wake a process that no longer listens,
// and its waiters elsewhere sleep out the holder's TTL).
func TestWakeChannelsLeft(t *testing.T) {
	key := dlocktest.Key(t)
	handOvers(t, func() *dlock.Client { return newRueidis(t, srv.Addr) }, []string{key}, 3, 5)
	admin := testserver.RedisClient(t, srv.Addr)
	testserver.Eventually(t, 10*time.Second, "the wake channels unsubscribed", func() bool {
		chans, err := admin.PubSubChannels(context.Background(), redislock.LockKey(key)+"*").Result()
		return err == nil && len(chans) == 0
	})
}

// awaitRueidisRefresh waits, for at most 10 s, until the goroutines that a
// rueidis Cluster client's topology refresh leaves to close old connections
// (they sleep 5 s first, and outlive the client's Close) have ended, so that
// the leak check at the end of the tests does not take them for dlock's.
func awaitRueidisRefresh() {
	buf := make([]byte, 1<<20)
	for range 200 {
		if !strings.Contains(string(buf[:runtime.Stack(buf, true)]), "rueidis.(*clusterClient)._refresh") {
			return
		}
		time.Sleep(50 * time.Millisecond) // no event tells of their end
	}
}
