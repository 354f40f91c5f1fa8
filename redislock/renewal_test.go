package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testproxy"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// tripConn counts round trips: a write after a read (or the first write) starts one.
type tripConn struct {
	net.Conn
	trips   *atomic.Int64
	reading atomic.Bool
}

func (c *tripConn) Write(p []byte) (int, error) {
	if c.reading.Swap(false) {
		c.trips.Add(1)
	}
	return c.Conn.Write(p)
}

func (c *tripConn) Read(p []byte) (int, error) {
	c.reading.Store(true)
	return c.Conn.Read(p)
}

// countingRDB returns a client of addr whose round trips trips counts.
func countingRDB(t *testing.T, addr string, trips *atomic.Int64) *redis.Client {
	return testserver.RedisClient(t, addr, func(o *redis.Options) {
		o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			tc := &tripConn{Conn: c, trips: trips}
			tc.reading.Store(true) // the first write is a round trip
			return tc, nil
		}
	})
}

// commandCalls returns the calls of command counted by INFO commandstats, or
// of every command but the test's bookkeeping when command is "".
func commandCalls(t *testing.T, admin *redis.Client, command string) int64 {
	t.Helper()
	calls := testserver.CommandCalls(t, admin, nil)
	if command != "" {
		return calls[command]
	}
	var total int64
	for _, n := range calls {
		total += n
	}
	return total
}

// TestBatchedRenewalCost: a Client holding K renewed leases renews them in
// batches: per renewal period, at most K/ExtendBatch plus a few script calls and
// round trips, and no goroutine per lease.
func TestBatchedRenewalCost(t *testing.T) {
	const k = 2000
	const ttl = 3 * time.Second // renewed every second
	s, admin := startRedis(t)
	ctx := context.Background()
	var trips atomic.Int64
	rdb := countingRDB(t, s.Addr, &trips)
	obs := &renewals{}
	c, err := redislock.New(rdb, dlock.WithTTL(ttl), dlock.WithAutoRenew(true), dlock.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	goroutines := runtime.NumGoroutine()
	leases := make([]*dlock.Lease, 0, k)
	defer func() {
		for _, l := range leases {
			_ = l.Unlock(ctx)
		}
	}()
	for i := range k {
		l, err := c.TryLock(ctx, fmt.Sprintf("%s:%d", dlocktest.Key(t), i))
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	// renewedAll waits until every lease has been renewed n times: the
	// measurement spans whole renewal rounds, however late a loaded host runs
	// them.
	renewedAll := func(n int) {
		testserver.Eventually(t, time.Duration(n+2)*ttl, fmt.Sprintf("every lease renewed %d times", n), func() bool {
			for _, l := range leases {
				if obs.count(l.Key()) < n {
					return false
				}
			}
			return true
		})
	}
	// The first renewal lets the renewals of leases taken at different times
	// fall in step; the next two are measured.
	renewedAll(1)
	tripsBefore, callsBefore := trips.Load(), commandCalls(t, admin, "evalsha")
	extendsBefore, allBefore := commandCalls(t, admin, "pexpire"), commandCalls(t, admin, "")
	grown := runtime.NumGoroutine() - goroutines
	renewedAll(3)
	gotTrips := trips.Load() - tripsBefore - 1 // less the INFO
	gotCalls := commandCalls(t, admin, "evalsha") - callsBefore
	gotExtends, gotAll := commandCalls(t, admin, "pexpire")-extendsBefore, commandCalls(t, admin, "")-allBefore
	// The rounds measured: two, and parts of the rounds on either side.
	rounds := gotExtends/k + 1
	t.Logf("%d leases, %d extends (about %d renewal rounds): %d round trips, %d script calls, %d server commands; %d more goroutines",
		k, gotExtends, rounds, gotTrips, gotCalls, gotAll, grown)
	if gotExtends < 2*k {
		t.Errorf("%d leases renewed twice each: %d extends, want at least %d", k, gotExtends, 2*k)
	}
	// Per round: K/ExtendBatch script calls and round trips, and a few more.
	if limit := gotExtends/redislock.ExtendBatch + 10*rounds; gotTrips > limit || gotCalls > limit {
		t.Errorf("%d extends of %d leases: %d round trips and %d script calls, want at most %d", gotExtends, k, gotTrips, gotCalls, limit)
	}
	// Per renewal: the extend (PEXPIRE), and the lease's share of its script
	// call and of the script's one read of every record (MGET).
	if limit := gotExtends + 2*(gotExtends/redislock.ExtendBatch+10*rounds); gotAll > limit {
		t.Errorf("%d extends of %d leases: %d server commands, want at most %d", gotExtends, k, gotAll, limit)
	}
	if grown > k/100 {
		t.Errorf("%d renewed leases cost %d goroutines, want at most %d", k, grown, k/100)
	}
	for _, l := range leases {
		if err := l.Err(); err != nil {
			t.Fatalf("lease %s: %v", l.Key(), err)
		}
	}
}

// renewals counts the outcomes of renewals per key.
type renewals struct {
	dlock.NopObserver
	mu  sync.Mutex
	got map[string][]string
}

func (r *renewals) Renewal(_ context.Context, e dlock.RenewalEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.got == nil {
		r.got = map[string][]string{}
	}
	r.got[e.Key] = append(r.got[e.Key], renewalOutcome(e.Err))
}

// since returns the outcomes of key's renewals from the n-th on.
func (r *renewals) since(key string, n int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.got[key]) <= n {
		return nil
	}
	return append([]string(nil), r.got[key][n:]...)
}

func (r *renewals) count(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got[key])
}

// TestBatchedRenewalLosesOnlyTheGoneLease: in a batch, a lease whose lock is
// gone is lost alone, and one whose key holds foreign data fails alone; the
// others of the same script call are renewed.
func TestBatchedRenewalLosesOnlyTheGoneLease(t *testing.T) {
	t.Run("server", func(t *testing.T) {
		s, admin := startRedis(t)
		losesOnlyTheGoneLease(t, newRDB(t, s.Addr), admin)
	})
	t.Run("cluster", func(t *testing.T) {
		cluster := testserver.StartCluster(t, 3)
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = rdb.Close() })
		losesOnlyTheGoneLease(t, rdb, rdb)
	})
}

func losesOnlyTheGoneLease(t *testing.T, rdb, admin redis.UniversalClient) {
	const k = 20
	ctx := context.Background()
	obs := &renewals{}
	c, err := redislock.New(rdb, dlock.WithTTL(3*time.Second), dlock.WithAutoRenew(true),
		dlock.WithRenewEvery(200*time.Millisecond), dlock.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	leases := holdMany(t, c, k)
	gone, foreign := leases[3], leases[7]
	// The renewals of every lease ride in one batch from the first round on.
	eventually(t, "every lease renewed once", func() bool {
		for _, l := range leases {
			if obs.count(l.Key()) == 0 {
				return false
			}
		}
		return true
	})
	if err := admin.Del(ctx, redislock.LockKey(gone.Key())).Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Set(ctx, redislock.LockKey(foreign.Key()), "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	marks := map[string]int{}
	for _, l := range leases {
		marks[l.Key()] = obs.count(l.Key())
	}
	select {
	case <-gone.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("the lease whose lock was deleted is still held")
	}
	if err := gone.Err(); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("gone lease: %v", err)
	}
	eventually(t, "two more renewals of every lease", func() bool {
		for _, l := range leases {
			if l != gone && len(obs.since(l.Key(), marks[l.Key()])) < 2 {
				return false
			}
		}
		return true
	})
	for _, l := range leases {
		got := obs.since(l.Key(), marks[l.Key()])
		switch l {
		case gone:
			if len(got) != 1 || got[0] != "not_held" {
				t.Errorf("gone lease's renewals: %v, want one not_held", got)
			}
		case foreign:
			for _, o := range got {
				if o != "transient" {
					t.Errorf("foreign key's renewals: %v, want transient failures", got)
				}
			}
		default:
			for _, o := range got {
				if o != "ok" {
					t.Errorf("lease %s: renewals %v, want ok", l.Key(), got)
				}
			}
			if err := l.Err(); err != nil {
				t.Errorf("lease %s: %v", l.Key(), err)
			}
		}
	}
	_ = admin.Del(ctx, redislock.LockKey(foreign.Key()))
}

// TestBatchedRenewalRidesOutAnOutage: a batch round trip that fails is a
// transient failure of every lease in it, retried within each lease's
// validity: a short outage loses none.
func TestBatchedRenewalRidesOutAnOutage(t *testing.T) {
	const k = 20
	s, _ := startRedis(t)
	p := testproxy.Start(t, s.Addr)
	obs := &renewals{}
	c, err := redislock.New(newRDB(t, p.Addr), dlock.WithTTL(3*time.Second), dlock.WithAutoRenew(true),
		dlock.WithRenewEvery(300*time.Millisecond), dlock.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	leases := holdMany(t, c, k)
	p.SetDown(true)
	marks := map[string]int{}
	for _, l := range leases {
		marks[l.Key()] = obs.count(l.Key())
	}
	eventually(t, "a failed renewal of every lease", func() bool {
		for _, l := range leases {
			if !contains(obs.since(l.Key(), marks[l.Key()]), "transient") {
				return false
			}
		}
		return true
	})
	p.SetDown(false)
	eventually(t, "a renewal of every lease after the outage", func() bool {
		for _, l := range leases {
			got := obs.since(l.Key(), marks[l.Key()])
			if len(got) == 0 || got[len(got)-1] != "ok" {
				return false
			}
		}
		return true
	})
	for _, l := range leases {
		if err := l.Err(); err != nil {
			t.Errorf("lease %s lost in a short outage: %v", l.Key(), err)
		}
	}
}

// holdMany takes k locks with c, unlocked when the test ends.
func holdMany(t *testing.T, c *redislock.Client, k int) []*dlock.Lease {
	t.Helper()
	ctx := context.Background()
	leases := make([]*dlock.Lease, 0, k)
	for i := range k {
		l, err := c.TryLock(ctx, fmt.Sprintf("%s:%d", dlocktest.Key(t), i))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Unlock(ctx) })
		leases = append(leases, l)
	}
	return leases
}

func contains(os []string, o string) bool {
	for _, x := range os {
		if x == o {
			return true
		}
	}
	return false
}

// renewalOutcome names how a renewal that returned err ended.
func renewalOutcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, dlock.ErrNotHeld):
		return "not_held"
	}
	return "transient"
}
