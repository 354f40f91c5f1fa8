package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"
)

// newClusterClient returns a cluster client seeded with addrs, closed by
// t.Cleanup.
func newClusterClient(t testing.TB, addrs []string) *redis.ClusterClient {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// masterAddr returns the address of the master that serves the lock named key.
func masterAddr(t testing.TB, rdb *redis.ClusterClient, key string) string {
	t.Helper()
	n, err := rdb.MasterForKey(context.Background(), redislock.LockKey(key))
	if err != nil {
		t.Fatal(err)
	}
	return n.Options().Addr
}

// keysOn returns perMaster lock names, starting with base, served by each of
// the given masters, and the names by master.
func keysOn(t testing.TB, rdb *redis.ClusterClient, base string, perMaster int, masters ...string) (keys []string, by map[string][]string) {
	t.Helper()
	by = map[string][]string{}
	for _, m := range masters {
		by[m] = nil
	}
	for i := 0; i < 1000 && len(keys) < perMaster*len(masters); i++ {
		k := base + "." + strconv.Itoa(i)
		if m := masterAddr(t, rdb, k); len(by[m]) < perMaster && slices.Contains(masters, m) {
			by[m] = append(by[m], k)
			keys = append(keys, k)
		}
	}
	return keys, by
}

// sectionTTL is the TTL of the contenders' leases: short, because a waiter may
// sleep until the holder's TTL when it misses a wake-up.
const sectionTTL = time.Second

// sectionCheck counts the holders inside each key's critical section and fails
// on a second one.
type sectionCheck struct {
	mu  sync.Mutex
	in  map[string]int
	n   map[string]int
	tok map[string]uint64
}

func newSectionCheck() *sectionCheck {
	return &sectionCheck{in: map[string]int{}, n: map[string]int{}, tok: map[string]uint64{}}
}

// enter records l's holder inside its key's section; it fails when another is
// inside or l's token is not above the previous holder's.
func (s *sectionCheck) enter(l *dlock.Lease) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := l.Key()
	s.in[k]++
	s.n[k]++
	if s.in[k] > 1 {
		return fmt.Errorf("%d holders of %q at once", s.in[k], k)
	}
	if prev := s.tok[k]; l.Token() <= prev {
		return fmt.Errorf("token %d of %q not above the previous holder's %d", l.Token(), k, prev)
	}
	s.tok[k] = l.Token()
	return nil
}

func (s *sectionCheck) leave(key string) {
	s.mu.Lock()
	s.in[key]--
	s.mu.Unlock()
}

// TestClusterEveryKindManyKeys: every lock kind on a cluster of three masters
// with a replica each, with locks on keys served by every master, contended by
// several Clients (each with its own cluster client): never two holders of a
// key, and every critical section's fenced increment lands.
func TestClusterEveryKindManyKeys(t *testing.T) {
	t0 := time.Now()
	cluster := testserver.StartClusterWithReplicas(t, 3, 1)
	t.Logf("cluster up in %v", time.Since(t0))
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	probe := newClusterClient(t, cluster.Addrs())
	if n, err := probe.ClusterNodes(ctx).Result(); err != nil {
		t.Fatal(err)
	} else if got := countRole(n, "slave"); got != 3 {
		t.Fatalf("%d replicas in CLUSTER NODES, want 3:\n%s", got, n)
	}
	kinds := []struct {
		name string
		mk   func(rdb redis.UniversalClient) (dlock.Locker, error)
	}{
		{"Mutex", func(rdb redis.UniversalClient) (dlock.Locker, error) { return redislock.New(rdb) }},
		{"Fair", func(rdb redis.UniversalClient) (dlock.Locker, error) { return redislock.NewFair(rdb) }},
		{"Semaphore1", func(rdb redis.UniversalClient) (dlock.Locker, error) { return redislock.NewSemaphore(rdb, 1) }},
		{"RWMutexWrite", func(rdb redis.UniversalClient) (dlock.Locker, error) {
			m, err := redislock.NewRWMutex(rdb)
			if err != nil {
				return nil, err
			}
			return m.Client, nil
		}},
		{"Reentrant", func(rdb redis.UniversalClient) (dlock.Locker, error) { return redislock.NewReentrant(rdb) }},
	}
	const clients, goroutines, rounds, perMaster = 3, 2, 3, 2
	for _, kind := range kinds {
		t.Run(kind.name, func(t *testing.T) {
			keys, by := keysOn(t, probe, dlocktest.Key(t), perMaster, cluster.Addrs()...)
			for _, m := range cluster.Addrs() {
				if len(by[m]) != perMaster {
					t.Fatalf("master %s serves %d of the keys %v, want %d", m, len(by[m]), by, perMaster)
				}
			}
			check := newSectionCheck()
			fence := newFence(t, probe)
			g, gctx := errgroup.WithContext(ctx)
			for c := 0; c < clients; c++ {
				rdb := newClusterClient(t, cluster.Addrs())
				l, err := kind.mk(rdb)
				if err != nil {
					t.Fatal(err)
				}
				fenced, err := redislock.NewFence(rdb)
				if err != nil {
					t.Fatal(err)
				}
				for _, key := range keys {
					for i := 0; i < goroutines; i++ {
						g.Go(func() error {
							for r := 0; r < rounds; r++ {
								lease, err := l.Lock(gctx, key, dlock.WithTTL(sectionTTL))
								if err != nil {
									return fmt.Errorf("Lock %q: %w", key, err)
								}
								if err := check.enter(lease); err != nil {
									return err
								}
								_, ferr := fenced.IncrBy(gctx, lease, "count:"+key, 1)
								time.Sleep(time.Millisecond) // stay inside a little, so that holders overlap
								check.leave(key)
								if err := errors.Join(ferr, lease.Unlock(gctx)); err != nil {
									return err
								}
							}
							return nil
						})
					}
				}
			}
			if err := g.Wait(); err != nil {
				t.Fatal(err)
			}
			for _, key := range keys {
				want := clients * goroutines * rounds
				if got, err := probe.Get(ctx, "count:"+key).Int(); err != nil || got != want || check.n[key] != want {
					t.Fatalf("%q: fenced count %d (%v), sections %d, want %d", key, got, err, check.n[key], want)
				}
				if _, tok, err := fence.Newest(ctx, "count:"+key); err != nil || tok != check.tok[key] {
					t.Fatalf("%q: newest fenced token %d (%v), last holder's %d", key, tok, err, check.tok[key])
				}
			}
		})
	}
}

// countRole counts the nodes of a CLUSTER NODES reply whose flags include role.
func countRole(nodes, role string) int {
	n := 0
	for _, line := range strings.Split(nodes, "\n") {
		if f := strings.Fields(line); len(f) > 2 && slices.Contains(strings.Split(f[2], ","), role) {
			n++
		}
	}
	return n
}

// replyCounter counts the error replies of a cluster client's node connections
// by their first word (TRYAGAIN, ASK, MOVED...).
type replyCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func countReplies(rdb *redis.ClusterClient) *replyCounter {
	rc := &replyCounter{n: map[string]int{}}
	rdb.OnNewNode(func(c *redis.Client) { c.AddHook(rc) })
	return rc
}

func (rc *replyCounter) get(word string) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.n[word]
}

func (rc *replyCounter) note(err error) {
	var rerr redis.Error
	if errors.As(err, &rerr) && !errors.Is(err, redis.Nil) {
		word, _, _ := strings.Cut(rerr.Error(), " ")
		rc.mu.Lock()
		rc.n[word]++
		rc.mu.Unlock()
	}
}

func (rc *replyCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (rc *replyCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		rc.note(cmd.Err())

		return err
	}
}

func (rc *replyCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			rc.note(c.Err())
		}
		return err
	}
}

// slotMove moves one hash slot between two masters of a cluster by hand, as
// redis-cli --cluster reshard does: IMPORTING on the target, MIGRATING on the
// source, MIGRATE of the slot's keys, then SETSLOT NODE on every master.
type slotMove struct {
	slot            int64
	src, dst        *redis.Client
	srcID, dstID    string
	dstHost, dstPrt string
	masters         []*redis.Client
}

func newSlotMove(ctx context.Context, t testing.TB, slot int64, src, dst *testserver.Redis, masters []*testserver.Redis) *slotMove {
	t.Helper()
	m := &slotMove{slot: slot, dstHost: "127.0.0.1", dstPrt: strconv.Itoa(dst.Port)}
	for _, r := range masters {
		c := newRDB(t, r.Addr)
		m.masters = append(m.masters, c)
		switch r {
		case src:
			m.src = c
		case dst:
			m.dst = c
		}
	}
	var err error
	if m.srcID, err = m.src.Do(ctx, "CLUSTER", "MYID").Text(); err != nil {
		t.Fatal(err)
	}
	if m.dstID, err = m.dst.Do(ctx, "CLUSTER", "MYID").Text(); err != nil {
		t.Fatal(err)
	}
	return m
}

// open puts the slot in the IMPORTING and MIGRATING states.
func (m *slotMove) open(ctx context.Context) error {
	return errors.Join(
		m.dst.Do(ctx, "CLUSTER", "SETSLOT", m.slot, "IMPORTING", m.srcID).Err(),
		m.src.Do(ctx, "CLUSTER", "SETSLOT", m.slot, "MIGRATING", m.dstID).Err())
}

// migrate moves keys (all the slot's keys when none are given) to the target
// and returns how many it moved.
func (m *slotMove) migrate(ctx context.Context, keys ...string) (int, error) {
	moved := 0
	for i := 0; i < 100; i++ {
		batch := keys
		if len(keys) == 0 {
			var err error
			if batch, err = m.src.ClusterGetKeysInSlot(ctx, int(m.slot), 100).Result(); err != nil {
				return moved, err
			}
		}
		if len(batch) == 0 {
			return moved, nil
		}
		args := []any{"MIGRATE", m.dstHost, m.dstPrt, "", 0, 5000, "KEYS"}
		for _, k := range batch {
			args = append(args, k)
		}
		if err := m.src.Do(ctx, args...).Err(); err != nil && !errors.Is(err, redis.Nil) && err.Error() != "NOKEY" {
			return moved, fmt.Errorf("MIGRATE %v: %w", batch, err)
		}
		moved += len(batch)
		if len(keys) > 0 {
			return moved, nil
		}
	}
	return moved, errors.New("slot still not empty")
}

// close assigns the slot to the target on every master, the target first.
func (m *slotMove) close(ctx context.Context) error {
	var errs []error
	for _, c := range append([]*redis.Client{m.dst, m.src}, m.masters...) {
		errs = append(errs, c.Do(ctx, "CLUSTER", "SETSLOT", m.slot, "NODE", m.dstID).Err())
	}
	return errors.Join(errs...)
}

// awaitCond polls cond until it holds or d passes.
func awaitCond(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testserver.Eventually(t, d, what, cond)
}

// TestClusterSlotMigrationLiveLocks migrates the slot of a lock that is held
// (and renewed) and waited for by other Clients. Half-way (the fence counter
// moved, the lock hash not yet), the acquire script's keys are split between
// the two nodes: the server answers TRYAGAIN, TryLock reports ErrUnavailable and
// the waiters' Lock calls retry. After the move the holder keeps its lock (it
// renews on the new node), the waiters take it in turn once it is released,
// and no two ever hold it at once.
func TestClusterSlotMigrationLiveLocks(t *testing.T) {
	cluster := testserver.StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	probe := newClusterClient(t, cluster.Addrs())
	src, dst := cluster.Nodes[0], cluster.Nodes[1]
	keys, _ := keysOn(t, probe, dlocktest.Key(t), 1, src.Addr)
	if len(keys) != 1 {
		t.Fatalf("no key on %s", src.Addr)
	}
	key := keys[0]
	slot, err := probe.ClusterKeySlot(ctx, redislock.LockKey(key)).Result()
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 600 * time.Millisecond
	newLocker := func() (*redislock.Client, *redislock.Fence, *replyCounter) {
		rdb := newClusterClient(t, cluster.Addrs())
		rc := countReplies(rdb)
		c, err := redislock.New(rdb, dlock.WithTTL(ttl), dlock.WithAutoRenew(true))
		if err != nil {
			t.Fatal(err)
		}
		f, err := redislock.NewFence(rdb)
		if err != nil {
			t.Fatal(err)
		}
		return c, f, rc
	}
	holderC, holderF, holderRC := newLocker()
	holder, err := holderC.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	check := newSectionCheck()
	if err := check.enter(holder); err != nil {
		t.Fatal(err)
	}
	if _, err := holderF.IncrBy(ctx, holder, "count:"+key, 1); err != nil {
		t.Fatal(err)
	}

	// Waiters of two other Clients, each taking the lock a few times.
	const waiterClients, perClient, rounds = 2, 2, 3
	var entries []time.Time // the waiters' entries into the section
	var entriesMu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	var counters []*replyCounter
	for c := 0; c < waiterClients; c++ {
		l, f, rc := newLocker()
		counters = append(counters, rc)
		for i := 0; i < perClient; i++ {
			g.Go(func() error {
				for r := 0; r < rounds; r++ {
					lease, err := l.Lock(gctx, key, dlock.WithWait(20*time.Second))
					if err != nil {
						return fmt.Errorf("waiter Lock: %w", err)
					}
					entriesMu.Lock()
					entries = append(entries, time.Now())
					entriesMu.Unlock()
					if err := check.enter(lease); err != nil {
						return err
					}
					_, ferr := f.IncrBy(gctx, lease, "count:"+key, 1)
					time.Sleep(5 * time.Millisecond)
					check.leave(key)
					if err := errors.Join(ferr, lease.Unlock(gctx)); err != nil {
						return err
					}
				}
				return nil
			})
		}
	}
	awaitCond(t, 10*time.Second, "both waiting Clients on the waiting set", func() bool {
		return probe.ZCard(ctx, redislock.WaitingKey(key)).Val() == waiterClients
	})

	// Half-way: only the fence counter has moved.
	mv := newSlotMove(ctx, t, slot, src, dst, cluster.Nodes)
	start := time.Now()
	if err := mv.open(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := mv.migrate(ctx, redislock.FenceKey(key)); err != nil {
		t.Fatal(err)
	}
	other, _, otherRC := newLocker()
	if _, err := other.TryLock(ctx, key); !errors.Is(err, dlock.ErrUnavailable) || otherRC.get("TRYAGAIN") == 0 {
		t.Fatalf("TryLock of a lock whose keys are split by a migration: %v (TRYAGAIN replies %d), want ErrUnavailable", err, otherRC.get("TRYAGAIN"))
	}
	awaitCond(t, 10*time.Second, "a waiter's retry answered TRYAGAIN", func() bool {
		return counters[0].get("TRYAGAIN")+counters[1].get("TRYAGAIN") > 0
	})
	if err := holder.Err(); err != nil {
		t.Fatalf("holder lost its lock half-way through the migration: %v (TRYAGAIN replies %d)", err, holderRC.get("TRYAGAIN"))
	}
	n, err := mv.migrate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := mv.close(ctx); err != nil {
		t.Fatal(err)
	}
	moved := time.Since(start)
	if mv.dst.Exists(ctx, redislock.LockKey(key)).Val() != 1 || mv.src.Exists(ctx, redislock.LockKey(key)).Val() != 0 {
		t.Fatalf("lock hash not moved from %s to %s", src.Addr, dst.Addr)
	}

	// The holder renews on the new node: wait for a renewal after the move.
	migrated := time.Now()
	awaitCond(t, 5*time.Second, "a renewal after the move", func() bool {
		return holder.Err() != nil || holder.Deadline().After(migrated.Add(ttl/2))
	})
	kept := holder.Err() == nil
	info, err := holderC.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if kept && (!info.Held || info.Token != holder.Token()) {
		t.Fatalf("holder believes it holds, the server says %+v", info)
	}
	pattern := redislock.WakeChannel(key) + "*"
	onSrc := len(mv.src.PubSubShardChannels(ctx, pattern).Val())
	onDst := len(mv.dst.PubSubShardChannels(ctx, pattern).Val())
	check.leave(key)
	released := time.Now()
	unlockErr := holder.Unlock(ctx)
	if kept && unlockErr != nil {
		t.Fatalf("holder's Unlock after the move: %v", unlockErr)
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	first, gap := entries[0].Sub(released), time.Duration(0)
	for i := 1; i < len(entries); i++ {
		gap = max(gap, entries[i].Sub(entries[i-1]))
	}
	want := 1 + waiterClients*perClient*rounds
	if got, err := probe.Get(ctx, "count:"+key).Int(); err != nil || got != want || check.n[key] != want {
		t.Fatalf("fenced count %d (%v), sections %d, want %d", got, err, check.n[key], want)
	}
	tryagain := counters[0].get("TRYAGAIN") + counters[1].get("TRYAGAIN")
	ask := counters[0].get("ASK") + counters[1].get("ASK")
	movedN := counters[0].get("MOVED") + counters[1].get("MOVED")
	t.Logf("SUMMARY slot migration of a held, waited-for plain lock: %d keys moved, slot in migration for %v; holder kept its lock: %v (lease err %v, unlock err %v); waiters got TRYAGAIN %d, ASK %d, MOVED %d times and retried; first waiter in %v after the holder's release, then %d sections in turn in %v (longest gap %v, lease TTL %v; the waiters' wake channels subscribed on the old master %d, on the new %d), never two holders",
		n+1, moved.Round(time.Millisecond), kept, holder.Err(), unlockErr, tryagain, ask, movedN, first.Round(time.Millisecond),
		len(entries), entries[len(entries)-1].Sub(entries[0]).Round(time.Millisecond), gap.Round(time.Millisecond), ttl, onSrc, onDst)
}

// role returns the replication role ("master" or "slave") that r reports.
func role(ctx context.Context, r *redis.Client) string {
	info, err := r.Info(ctx, "replication").Result()
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "role:"); ok {
			return v
		}
	}
	return ""
}

// clusterOK reports whether every node reports cluster_state:ok.
func clusterOK(ctx context.Context, nodes ...*redis.Client) bool {
	for _, n := range nodes {
		if !strings.Contains(n.ClusterInfo(ctx).Val(), "cluster_state:ok") {
			return false
		}
	}
	return true
}

// TestClusterFailoverHeldLocks fails masters over while locks on them are held.
// A graceful failover (CLUSTER FAILOVER on the replica, which first catches up
// with its master) keeps every lock: the holders renew on the promoted replica,
// a newcomer is refused and a waiter takes the lock on release. A master killed
// before its last lock write reached the replica (the replication link is cut
// first) loses that lock in the automatic promotion: a second Client takes the
// lock that the first still believes it holds, and the first learns it only at
// its next renewal; its fenced writes are refused meanwhile, since the second
// holder's token is higher.
func TestClusterFailoverHeldLocks(t *testing.T) {
	cluster := testserver.StartClusterWithReplicas(t, 3, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	nodes := map[*testserver.Redis]*redis.Client{}
	node := func(r *testserver.Redis) *redis.Client {
		if nodes[r] == nil {
			nodes[r] = newRDB(t, r.Addr)
		}
		return nodes[r]
	}
	probe := newClusterClient(t, cluster.Addrs())
	const ttl = 3 * time.Second
	newLocker := func(addrs []string, opts ...dlock.Option) (*redislock.Client, *redislock.Fence) {
		// go-redis reloads its slot map on MOVED and READONLY replies, and
		// otherwise only every ClusterStateReloadInterval (60s by default): a
		// client whose master died keeps dialing it until then. A short
		// interval lets it find the promoted replica within seconds.
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true, ClusterStateReloadInterval: time.Second})
		t.Cleanup(func() { _ = rdb.Close() })
		c, err := redislock.New(rdb, opts...)
		if err != nil {
			t.Fatal(err)
		}
		f, err := redislock.NewFence(rdb)
		if err != nil {
			t.Fatal(err)
		}
		return c, f
	}

	t.Run("Graceful", func(t *testing.T) {
		m, r := cluster.Nodes[0], cluster.Replicas[0][0]
		keys, _ := keysOn(t, probe, dlocktest.Key(t), 3, m.Addr)
		holderC, _ := newLocker(cluster.Addrs(), dlock.WithTTL(ttl), dlock.WithAutoRenew(true))
		var held []*dlock.Lease
		for _, k := range keys {
			l, err := holderC.TryLock(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, l)
		}
		waiterC, _ := newLocker(cluster.Addrs())
		got := make(chan *dlock.Lease, 1)
		go func() {
			l, err := waiterC.Lock(ctx, keys[0], dlock.WithWait(20*time.Second), dlock.WithTTL(ttl), dlock.WithAutoRenew(true))
			if err != nil {
				t.Errorf("waiter: %v", err)
			}
			got <- l
		}()
		awaitCond(t, 10*time.Second, "the waiter on the waiting set", func() bool {
			return probe.ZCard(ctx, redislock.WaitingKey(keys[0])).Val() == 1
		})

		start := time.Now()
		if err := node(r).Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
			t.Fatal(err)
		}
		awaitCond(t, 15*time.Second, "the replica promoted", func() bool {
			return role(ctx, node(r)) == "master" && role(ctx, node(m)) == "slave" && clusterOK(ctx, node(r), node(m))
		})
		promoted := time.Since(start)
		after := time.Now()
		awaitCond(t, 10*time.Second, "a renewal of every lease after the failover", func() bool {
			for _, l := range held {
				if l.Err() == nil && !l.Deadline().After(after.Add(ttl/2)) {
					return false
				}
			}
			return true
		})
		for i, l := range held {
			if err := l.Err(); err != nil {
				t.Fatalf("lease %d lost in a graceful failover (promotion took %v): %v", i, promoted, err)
			}
			if rec, _ := redislock.ParseRecord(node(r).Get(ctx, redislock.LockKey(keys[i])).Val()); rec.Owner != l.Owner() {
				t.Fatalf("lock %d on the promoted replica owned by %q, want %q", i, rec.Owner, l.Owner())
			}
		}
		newcomer, _ := newLocker([]string{r.Addr})
		if _, err := newcomer.TryLock(ctx, keys[1]); !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("newcomer TryLock after the failover: %v, want ErrNotObtained", err)
		}
		subscribed := len(node(r).PubSubShardChannels(ctx, redislock.WakeChannel(keys[0])+"*").Val())
		released := time.Now()
		if err := held[0].Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		w := <-got
		if w == nil {
			t.FailNow()
		}
		waited := time.Since(released)
		if w.Token() <= held[0].Token() {
			t.Fatalf("waiter's token %d not above the holder's %d", w.Token(), held[0].Token())
		}
		if err := errors.Join(w.Unlock(ctx), held[1].Unlock(ctx), held[2].Unlock(ctx)); err != nil {
			t.Fatal(err)
		}
		t.Logf("SUMMARY graceful failover (CLUSTER FAILOVER) with %d locks held and a waiter: replica promoted in %v; every lease kept and renewed on the new master, a newcomer refused; the waiter took the released lock %v after its release (lease TTL %v; its wake channels subscribed on the new master: %d)",
			len(held), promoted.Round(time.Millisecond), waited.Round(time.Millisecond), ttl, subscribed)
	})

	t.Run("KillUnreplicated", func(t *testing.T) {
		m, r := cluster.Nodes[1], cluster.Replicas[1][0]
		keys, _ := keysOn(t, probe, dlocktest.Key(t), 1, m.Addr)
		key := keys[0]
		// A resource fenced on another master, which survives.
		var resource string
		for i := 0; i < 1000 && resource == ""; i++ {
			res := "res:" + key + "." + strconv.Itoa(i)
			rk, _ := redislock.FenceRecordKey(res)
			if n, err := probe.MasterForKey(ctx, rk); err == nil && n.Options().Addr != m.Addr {
				resource = res
			}
		}
		live := []string{cluster.Nodes[0].Addr, cluster.Replicas[0][0].Addr, cluster.Nodes[2].Addr, r.Addr}
		// The first holder's lease outlives the test: it learns of the loss from
		// the server, not from its local deadline.
		first, firstF := newLocker(cluster.Addrs(), dlock.WithTTL(30*time.Second))

		// Cut replication: the replica is stopped and the master drops its link,
		// so the lock written next stays on the master alone.
		if err := r.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		stopped := true
		defer func() {
			if stopped {
				_ = r.Signal(syscall.SIGCONT)
			}
		}()
		if err := node(m).Do(ctx, "CLIENT", "KILL", "TYPE", "replica").Err(); err != nil {
			t.Fatal(err)
		}
		lease, err := first.TryLock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := firstF.IncrBy(ctx, lease, resource, 1); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		m.Stop()
		if err := r.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		stopped = false
		awaitCond(t, 20*time.Second, "the replica promoted after its master's death", func() bool {
			return role(ctx, node(r)) == "master" && clusterOK(ctx, node(r), node(cluster.Nodes[2]))
		})
		promoted := time.Since(start)
		if n := node(r).Exists(ctx, redislock.LockKey(key)).Val(); n != 0 {
			t.Fatalf("the lock reached the replica although its link was cut")
		}

		second, secondF := newLocker(live, dlock.WithTTL(30*time.Second))
		var taken *dlock.Lease
		awaitCond(t, 10*time.Second, "the second Client takes the lock", func() bool {
			taken, err = second.TryLock(ctx, key)
			return err == nil
		})
		believes := lease.Err() == nil && time.Now().Before(lease.Deadline())
		if !believes {
			t.Fatalf("the first holder already knows it lost the lock: %v", lease.Err())
		}
		if taken.Token() <= lease.Token() {
			t.Fatalf("second holder's token %d not above the first's %d", taken.Token(), lease.Token())
		}
		if _, err := secondF.IncrBy(ctx, taken, resource, 1); err != nil {
			t.Fatalf("second holder's fenced write: %v", err)
		}
		_, staleErr := firstF.IncrBy(ctx, lease, resource, 1)
		if !errors.Is(staleErr, dlock.ErrStaleToken) {
			t.Fatalf("stale holder's fenced write: %v, want ErrStaleToken", staleErr)
		}
		// Its cluster client routes the slot to the dead master until it
		// reloads its slot map: renewals meanwhile fail with ErrUnavailable.
		var extendErr error
		unavailable := 0
		awaitCond(t, 15*time.Second, "the first holder told at its next renewal", func() bool {
			extendErr = lease.Extend(ctx, 30*time.Second)
			if errors.Is(extendErr, dlock.ErrUnavailable) {
				unavailable++
			}
			return errors.Is(extendErr, dlock.ErrNotHeld)
		})
		told := time.Since(start)
		if v := probe.Get(ctx, resource).Val(); v != "2" {
			t.Fatalf("resource = %q, want 2 (one write of each holder)", v)
		}
		if err := taken.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("SUMMARY master killed before its lock write replicated: replica promoted %v after the kill; the lock was gone on it, a second Client took it (token %d > %d) while the first still believed it held it; the first holder's fenced write was refused (%v); %d of its renewals failed with ErrUnavailable before its cluster client found the promoted replica (ClusterStateReloadInterval 1s), and %v after the kill one reported: %v",
			promoted.Round(time.Millisecond), taken.Token(), lease.Token(), staleErr, unavailable, told.Round(time.Millisecond), extendErr)
	})
}
