package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
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
