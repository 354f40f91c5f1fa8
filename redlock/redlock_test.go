package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testproxy"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/redislock"
	"github.com/dlock-go/dlock/redlock"
	"github.com/redis/go-redis/v9"
)

// srvs are the five independent masters every test shares. A test that stops
// some restarts them (empty: they have no persistence) before it ends.
var srvs []*testserver.Redis

// quiet drops go-redis's log lines (failed dials to the servers a test stopped).
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quiet{})
	if os.Getenv(workerEnv) != "" {
		os.Exit(contendMain())
	}
	os.Exit(testserver.MainN(m, 5, func(rs []*testserver.Redis) { srvs = rs }))
}

func addrs() []string {
	out := make([]string, len(srvs))
	for i, s := range srvs {
		out[i] = s.Addr
	}
	return out
}

func newRDB(t testing.TB, addr string) *redis.Client {
	return testserver.RedisClient(t, addr, func(o *redis.Options) { o.DialTimeout, o.DialerRetries = time.Second, 1 })
}

func nodes(t testing.TB, at []string) []redis.UniversalClient {
	out := make([]redis.UniversalClient, len(at))
	for i, a := range at {
		out[i] = newRDB(t, a)
	}
	return out
}

func newClientAt(t testing.TB, at []string, dopts []redlock.Option, opts ...dlock.Option) *redlock.Client {
	ns := nodes(t, at)
	// Dial every node first, as a long-lived client has: the tests' short TTLs
	// leave no room for five cold connections on a loaded machine.
	for _, n := range ns {
		_ = n.Ping(context.Background()).Err() // a stopped node stays cold
	}
	d, err := redlock.NewDriver(ns, dopts...)
	if err != nil {
		t.Fatal(err)
	}
	c, err := redlock.NewClient(d, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newClient(t testing.TB, opts ...dlock.Option) *redlock.Client {
	return newClientAt(t, addrs(), nil, opts...)
}

// proxiedClient returns a Client with the given node timeout whose nodes idx
// are reached through the returned proxies (in idx's order), every node's
// connection warmed, and identified, by a lock taken and released on key, so
// that dialling is not measured.
func proxiedClient(t testing.TB, ctx context.Context, key string, nodeTimeout time.Duration, idx ...int) (*redlock.Client, []*testproxy.Proxy) {
	t.Helper()
	at := addrs()
	proxies := make([]*testproxy.Proxy, len(idx))
	for n, i := range idx {
		proxies[n] = testproxy.Start(t, at[i])
		at[i] = proxies[n].Addr
	}
	c := newClientAt(t, at, []redlock.Option{redlock.WithNodeTimeout(nodeTimeout)})
	l, err := c.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	return c, proxies
}

// stop kills the servers with the given indexes; they are started again, empty,
// when the test ends (or earlier with start).
func stop(t testing.TB, idx ...int) {
	t.Helper()
	for _, i := range idx {
		srvs[i].Stop()
		t.Cleanup(func() { start(t, i) })
	}
}

// start starts server i again if it is down; with no persistence it is empty.
func start(t testing.TB, i int) {
	t.Helper()
	if srvs[i].PID() != 0 {
		return
	}
	if err := srvs[i].Start(); err != nil {
		t.Fatal(err)
	}
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// held returns the indexes of the servers on which key's lock hash exists.
func held(t testing.TB, key string, idx ...int) []int {
	t.Helper()
	var out []int
	for _, i := range idx {
		// A held lock record (see redislock) names its owner after a space; a
		// released one is its token alone.
		v, err := newRDB(t, srvs[i].Addr).Get(context.Background(), redislock.LockKey(key)).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("node %d: %v", i, err)
		}
		if strings.Contains(v, " ") {
			out = append(out, i)
		}
	}
	return out
}

func TestConformance(t *testing.T) {
	dlocktest.Run(t, dlocktest.Backend{
		New: func(t testing.TB, opts ...dlock.Option) dlock.Locker { return newClient(t, opts...) },
		Occupy: func(t testing.TB, key string) func() bool {
			k := redislock.LockKey(key)
			var rdbs []*redis.Client
			for _, a := range addrs() {
				rdb := newRDB(t, a)
				if err := rdb.RPush(context.Background(), k, "a", "b").Err(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { rdb.Del(context.Background(), k) })
				rdbs = append(rdbs, rdb)
			}
			return func() bool {
				for _, rdb := range rdbs {
					v, err := rdb.LRange(context.Background(), k, 0, -1).Result()
					if err != nil || len(v) != 2 || rdb.PTTL(context.Background(), k).Val() != -1 {
						return false
					}
				}
				return true
			}
		},
		Info: driver.DriverInfo{Backend: "redlock", Kind: driver.KindMutex},
	})
}

func TestNewDriverRejectsBadNodes(t *testing.T) {
	a := addrs()
	ok := func() []redis.UniversalClient { return nodes(t, a[:3]) }
	var nilClient *redis.Client
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: a[:1]})
	defer cluster.Close()
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a[0]}})
	defer ring.Close()
	same := newRDB(t, a[0])
	cases := map[string]struct {
		nodes []redis.UniversalClient
		opts  []redlock.Option
		want  string
	}{
		"none":         {nil, nil, "no nodes"},
		"one":          {ok()[:1], nil, "one node"},
		"even":         {append(ok(), newRDB(t, a[3])), nil, "odd number"},
		"nil":          {[]redis.UniversalClient{ok()[0], nil, ok()[2]}, nil, "node 1 is nil"},
		"typed nil":    {[]redis.UniversalClient{ok()[0], nilClient, ok()[2]}, nil, "node 1 is nil"},
		"cluster":      {[]redis.UniversalClient{ok()[0], ok()[1], cluster}, nil, "node 2 is a Redis Cluster client"},
		"ring":         {[]redis.UniversalClient{ring, ok()[1], ok()[2]}, nil, "node 0 is a redis.Ring"},
		"same client":  {[]redis.UniversalClient{same, ok()[1], same}, nil, "nodes 0 and 2 are the same client"},
		"same server":  {[]redis.UniversalClient{newRDB(t, a[0]), newRDB(t, a[1]), newRDB(t, a[0])}, nil, "nodes 0 and 2 are the same server"},
		"nil option":   {ok(), []redlock.Option{nil}, "nil option"},
		"zero timeout": {ok(), []redlock.Option{redlock.WithNodeTimeout(0)}, "node timeout"},
		"neg timeout":  {ok(), []redlock.Option{redlock.WithNodeTimeout(-time.Second)}, "node timeout"},
	}
	for name, tc := range cases {
		_, err := redlock.NewDriver(tc.nodes, tc.opts...)
		if !errors.Is(err, dlock.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalid saying %q", name, err, tc.want)
		}
	}
	if _, err := redlock.New(ok(), dlock.WithTTL(0)); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("New with a bad default: %v", err)
	}
	if _, err := redlock.NewClient(nil); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("NewClient(nil): %v", err)
	}
}

// TestTwoNodesDownStillLocks: with two of five masters down, a majority is
// still there, and everything works: lock, exclusion, tokens, extend, release.
func TestTwoNodesDownStillLocks(t *testing.T) {
	key := dlocktest.Key(t)
	a, b := newClient(t), newClient(t)
	stop(t, 0, 3)
	ctx := ctxT(t, 20*time.Second)
	la, err := a.Lock(ctx, key, dlock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatalf("Lock with 2 of 5 down: %v", err)
	}
	if _, err := b.TryLock(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("second TryLock: %v, want ErrNotObtained", err)
	}
	if err := la.Extend(ctx, 10*time.Second); err != nil {
		t.Fatalf("Extend with 2 of 5 down: %v", err)
	}
	if ttl, err := la.TTL(ctx); err != nil || ttl <= 5*time.Second {
		t.Fatalf("TTL after Extend: %v, %v", ttl, err)
	}
	info, err := b.Inspect(ctx, key)
	if err != nil || !info.Held || info.Owner != la.Owner() || info.Token != la.Token() {
		t.Fatalf("Inspect with 2 of 5 down: %+v, %v", info, err)
	}
	if err := la.Unlock(ctx); err != nil {
		t.Fatalf("Unlock with 2 of 5 down: %v", err)
	}
	lb, err := b.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if lb.Token() <= la.Token() {
		t.Errorf("token %d after %d", lb.Token(), la.Token())
	}
	if err := lb.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestThreeNodesDownFailsAndLeavesNothing: with three of five masters down, Lock
// fails within its wait with an error that says so, and once the masters are
// back nothing is locked.
func TestThreeNodesDownFailsAndLeavesNothing(t *testing.T) {
	key := dlocktest.Key(t)
	c := newClient(t)
	stop(t, 1, 2, 4)
	const wait = 400 * time.Millisecond
	begin := time.Now()
	_, err := c.Lock(ctxT(t, 10*time.Second), key, dlock.WithWait(wait))
	el := time.Since(begin)
	if !errors.Is(err, dlock.ErrUnavailable) || errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("Lock with 3 of 5 down: %v, want ErrUnavailable", err)
	}
	if !strings.Contains(err.Error(), "2 of 5 nodes granted the lock, 3 needed") {
		t.Errorf("error does not say what happened: %v", err)
	}
	var ne *redlock.NodeError
	if !errors.As(err, &ne) || (ne.Node != 1 && ne.Node != 2 && ne.Node != 4) {
		t.Errorf("error names no failed node: %v", err)
	}
	if el < wait || el > wait+2*time.Second {
		t.Errorf("Lock with a %v wait returned after %v", wait, el)
	}
	if h := held(t, key, 0, 3); len(h) != 0 {
		for _, i := range h {
			rdb := newRDB(t, srvs[i].Addr)
			t.Logf("node %d: %q %v", i, rdb.Get(context.Background(), redislock.LockKey(key)).Val(), rdb.Keys(context.Background(), "*"+key+"*").Val())
		}
		t.Fatalf("nodes %v still hold the lock after the failed Lock", h)
	}
	for _, i := range []int{1, 2, 4} {
		start(t, i)
	}
	l, err := newClient(t).TryLock(ctxT(t, 10*time.Second), key)
	if err != nil {
		t.Fatalf("TryLock once the nodes are back: %v", err)
	}
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestSlowNodeDoesNotSlowAcquire: a node behind a proxy that delays its replies
// by far more than the node timeout neither slows an acquisition that a majority
// settles without it, nor holds one that needs it beyond the node timeout.
func TestSlowNodeDoesNotSlowAcquire(t *testing.T) {
	const delay, timeout = 2 * time.Second, 150 * time.Millisecond
	ctx := ctxT(t, 20*time.Second)
	key := dlocktest.Key(t)
	c, proxies := proxiedClient(t, ctx, key, timeout, 0, 1, 2)

	proxies[0].SetLatency(testproxy.Downstream, delay)
	begin := time.Now()
	l, err := c.TryLock(ctx, key, dlock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatalf("TryLock with one slow node: %v", err)
	}
	if el := time.Since(begin); el >= timeout {
		t.Errorf("TryLock with one slow node took %v, the node timeout is %v", el, timeout)
	}
	begin = time.Now()
	if err := l.Extend(ctx, 5*time.Second); err != nil {
		t.Fatalf("Extend with one slow node: %v", err)
	}
	if el := time.Since(begin); el >= timeout {
		t.Errorf("Extend with one slow node took %v, the node timeout is %v", el, timeout)
	}
	begin = time.Now()
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock with one slow node: %v", err)
	}
	// Unlock waits for the slow node's release up to the node timeout, not
	// for its reply.
	if el := time.Since(begin); el >= timeout+delay/2 {
		t.Errorf("Unlock with one slow node took %v; node timeout %v, delay %v", el, timeout, delay)
	}

	// Two nodes refuse connections: the third, slow one decides, and the
	// attempt gives up on it at the node timeout.
	proxies[1].SetDown(true)
	proxies[2].SetDown(true)
	begin = time.Now()
	_, err = c.TryLock(ctx, key, dlock.WithTTL(5*time.Second))
	el := time.Since(begin)
	if !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("TryLock with two nodes down and one slow: %v, want ErrUnavailable", err)
	}
	if el < timeout || el > timeout+delay/2 {
		t.Errorf("TryLock that needed the slow node took %v; node timeout %v, delay %v", el, timeout, delay)
	}
	proxies[0].SetLatency(testproxy.Downstream, 0)
	proxies[1].SetDown(false)
	proxies[2].SetDown(false)
	// The give-up released (or abandoned) what reached the slow node: the
	// lock is free again within a TTL at the latest.
	l, err = newClient(t).Lock(ctx, key, dlock.WithWait(6*time.Second))
	if err != nil {
		t.Fatalf("Lock after the faults: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestUnlockReleasesEveryNodeThatAnswers: a node whose requests arrive late,
// but within the node timeout, no longer holds the lock when Unlock returns: a
// process that exits right after Unlock must not leave it holding the lock
// until its TTL (with a second node failing, nobody could take the lock).
func TestUnlockReleasesEveryNodeThatAnswers(t *testing.T) {
	const delay = 100 * time.Millisecond
	at := addrs()
	slow := testproxy.Start(t, at[1])
	at[1] = slow.Addr
	c := newClientAt(t, at, []redlock.Option{redlock.WithNodeTimeout(2 * time.Second)})
	direct := newRDB(t, addrs()[1])
	ctx := ctxT(t, 20*time.Second)
	for i := range 3 {
		key := dlocktest.Key(t)
		slow.SetLatency(testproxy.Upstream, 0)
		// Warm the connections, so that the delay is the only slowness.
		l, err := c.TryLock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		slow.SetLatency(testproxy.Upstream, delay)
		if l, err = c.TryLock(ctx, key, dlock.WithTTL(10*time.Second)); err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		// A released lock record is the token alone; a held one names its owner.
		if v := direct.Get(ctx, redislock.LockKey(key)).Val(); strings.Contains(v, " ") {
			t.Fatalf("round %d: the slow node still holds the lock after Unlock returned: %q", i, v)
		}
	}
}

// TestExtendWithoutMajorityAnswerIsNotALoss: a node that no longer holds the
// lock and two that do not answer leave no majority either way: the extend fails
// as unavailable, and the lease stays held until its deadline.
func TestExtendWithoutMajorityAnswerIsNotALoss(t *testing.T) {
	key := dlocktest.Key(t)
	ctx := ctxT(t, 20*time.Second)
	c := newClient(t)
	la, err := c.TryLock(ctx, key, dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := newRDB(t, srvs[0].Addr).Del(ctx, redislock.LockKey(key)).Err(); err != nil {
		t.Fatal(err)
	}
	stop(t, 1, 2)
	err = la.Extend(ctx, 10*time.Second)
	if !errors.Is(err, dlock.ErrUnavailable) || errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Extend with 2 holding, 1 not, 2 down: %v, want ErrUnavailable only", err)
	}
	if la.Err() != nil {
		t.Fatalf("lease ended by an extend that could not decide: %v", la.Err())
	}
	_ = la.Unlock(ctx)
}

// TestAcquireIsIdempotentForItsOwner: a second attempt by the same owner (a
// retry after a lost reply) gets its holding back, with a token not below the
// first, and the holding is still one.
func TestAcquireIsIdempotentForItsOwner(t *testing.T) {
	d, err := redlock.NewDriver(nodes(t, addrs()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 10*time.Second)
	r := driver.AcquireRequest{Key: dlocktest.Key(t), Owner: "0123456789abcdef0123456789abcdef", TTL: 5 * time.Second}
	g1, err := d.Acquire(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	g2, err := d.Acquire(ctx, r)
	if err != nil {
		t.Fatalf("second attempt of the same owner: %v", err)
	}
	if g2.Token < g1.Token {
		t.Errorf("token of the retry %d below the first %d", g2.Token, g1.Token)
	}
	other := r
	other.Owner = "fedcba9876543210fedcba9876543210"
	if _, err := d.Acquire(ctx, other); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("another owner: %v, want ErrNotObtained", err)
	}
	if err := d.Release(ctx, driver.Holding{Key: r.Key, Owner: r.Owner, TTL: r.TTL}); err != nil {
		t.Fatal(err)
	}
}

// TestMinorityHoldingShowsFree: a holding left on a minority of the nodes (an
// acquisition that failed, until its TTL) is not a lock: Inspect and List show
// it free, ForceUnlock removes it and says no majority held it, and the lock can
// be taken.
func TestMinorityHoldingShowsFree(t *testing.T) {
	key := dlocktest.Key(t)
	ctx := ctxT(t, 10*time.Second)
	one, err := newClient(t).Driver().(*redlock.Driver).Inspect(ctx, key)
	if err != nil || one.Held {
		t.Fatalf("Inspect of a free lock: %+v, %v", one, err)
	}
	// A stray holding on nodes 0 and 1, written as an attempt leaves it.
	for _, i := range []int{0, 1} {
		rdb := newRDB(t, srvs[i].Addr)
		// A lock record (see redislock): token 1, owner "stray".
		if err := rdb.Set(ctx, redislock.LockKey(key), "-1 stray", 10*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
	}
	c := newClient(t)
	info, err := c.Inspect(ctx, key)
	if err != nil || info.Held {
		t.Fatalf("Inspect of a minority holding: %+v, %v", info, err)
	}
	list, err := c.List(ctx, key)
	if err != nil || len(list) != 0 {
		t.Fatalf("List of a minority holding: %+v, %v", list, err)
	}
	if _, err := c.ForceUnlock(ctx, key); !errors.Is(err, dlock.ErrNotHeld) || !strings.Contains(err.Error(), "2 partial holdings removed") {
		t.Fatalf("ForceUnlock of a minority holding: %v", err)
	}
	if h := held(t, key, 0, 1); len(h) != 0 {
		t.Fatalf("ForceUnlock left the stray holding on %v", h)
	}
	l, err := c.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSilentNodeLeavesMinorityUndecided: a holding on two of the five nodes
// while a third node is down may be a majority holding: Inspect and
// ForceUnlock (and List) say that they cannot tell (ErrUnavailable), not that the lock is
// free; with one node holding it and one down, the answers decide: free.
func TestSilentNodeLeavesMinorityUndecided(t *testing.T) {
	key := dlocktest.Key(t)
	ctx := ctxT(t, 10*time.Second)
	stray := func(idx ...int) {
		for _, i := range idx {
			// A lock record (see redislock): token 1, owner "stray".
			if err := newRDB(t, srvs[i].Addr).Set(ctx, redislock.LockKey(key), "-1 stray", 10*time.Second).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	c := newClient(t)
	stray(0, 1)
	stop(t, 2)
	if info, err := c.Inspect(ctx, key); !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("Inspect with 2 nodes holding and 1 down: %+v, %v; want ErrUnavailable", info, err)
	}
	if list, err := c.List(ctx, key); !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("List with 2 nodes holding and 1 down: %+v, %v; want ErrUnavailable", list, err)
	}
	_, err := c.ForceUnlock(ctx, key)
	if !errors.Is(err, dlock.ErrUnavailable) || errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("ForceUnlock with 2 nodes holding and 1 down: %v; want ErrUnavailable", err)
	}
	if h := held(t, key, 0, 1); len(h) != 0 {
		t.Fatalf("ForceUnlock left the holdings on %v", h)
	}
	stray(0)
	if info, err := c.Inspect(ctx, key); err != nil || info.Held {
		t.Fatalf("Inspect with 1 node holding and 1 down: %+v, %v; want free", info, err)
	}
	if _, err := c.ForceUnlock(ctx, key); !errors.Is(err, dlock.ErrNotHeld) || !strings.Contains(err.Error(), "1 partial holdings removed: on nodes 0") {
		t.Fatalf("ForceUnlock with 1 node holding and 1 down: %v; want ErrNotHeld naming node 0", err)
	}
}

// TestBatchedRenewal: a Redlock Client renews its leases in one batch per
// node, and a lease whose lock a majority of nodes lost is lost alone.
func TestBatchedRenewal(t *testing.T) {
	const k = 300
	ctx := context.Background()
	c := newClient(t, dlock.WithTTL(3*time.Second), dlock.WithAutoRenew(true), dlock.WithRenewEvery(300*time.Millisecond))
	var leases []*dlock.Lease
	for i := range k {
		l, err := c.TryLock(ctx, fmt.Sprintf("%s:%d", dlocktest.Key(t), i))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Unlock(ctx)
		leases = append(leases, l)
	}
	admins := make([]*redis.Client, len(srvs))
	before := make([]int64, len(srvs))
	for i, s := range srvs {
		admins[i] = newRDB(t, s.Addr)
		before[i] = evalshaCalls(t, admins[i])
	}
	gone := leases[5]
	for _, a := range admins[:3] { // a majority forgets it
		if err := a.Del(ctx, redislock.LockKey(gone.Key())).Err(); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-gone.Done():
	case <-time.After(3 * time.Second):
		t.Fatal("the lease a majority lost is still held")
	}
	if err := gone.Err(); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("lost lease: %v", err)
	}
	for i, a := range admins {
		// Each node saw the renewals of all k leases in a few script calls
		// per round, not k.
		if n := evalshaCalls(t, a) - before[i] - 1; n > 3*(k/redislock.ExtendBatch+1)*4 {
			t.Errorf("node %d: %d script calls for about one renewal round of %d leases", i, n, k)
		}
	}
	for _, l := range leases {
		if l != gone {
			if err := l.Err(); err != nil {
				t.Errorf("lease %s: %v", l.Key(), err)
			}
		}
	}
}

// evalshaCalls is the server's count of EVALSHA calls (INFO commandstats).
func evalshaCalls(t *testing.T, admin *redis.Client) int64 {
	t.Helper()
	s, err := admin.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(line, "cmdstat_evalsha:calls="); ok {
			v, _, _ = strings.Cut(v, ",")
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}
