//go:build linux

package main

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/etcdlock"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/pglock"
	"github.com/dlock-go/dlock/redislock"
	"github.com/dlock-go/dlock/zklock"
	"github.com/go-zookeeper/zk"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func TestVerifyRefusesWithoutPrefix(t *testing.T) {
	for _, args := range [][]string{
		{"verify", "--duration", "1s"},
		{"verify", "--prefix", "", "--duration", "1s"},
		{"verify", "--prefix", "a*", "--duration", "1s"},
	} {
		r := dlockRun(t, args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "--prefix") {
			t.Errorf("dlock %v: exit %d, stderr %q; want 64 and a word on --prefix", args, r.code, r.stderr)
		}
	}
}

// verifyKeys returns every key of the Redis server at addr with its value
// (its type for what is not a string).
func verifyKeys(t *testing.T, addr string) map[string]string {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, k := range keys {
		v, err := rdb.Get(ctx, k).Result()
		if err != nil {
			v = "type " + rdb.Type(ctx, k).Val()
		}
		out[k] = v
	}
	return out
}

// TestVerifyOnRedis runs dlock verify on a Redis that holds other keys, a lock
// of another name among them: every property holds, the history is written,
// and the server ends with exactly the keys it had.
func TestVerifyOnRedis(t *testing.T) {
	s := testserver.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer rdb.Close()
	ctx := context.Background()
	for k, v := range map[string]string{"app:counter": "41", "vt:plain": "x", "dlock:{vt}": "not ours", "dlock:{other}:fence": "7"} {
		if err := rdb.Set(ctx, k, v, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.HSet(ctx, "dlock:{held-elsewhere}", "owner", "someone").Err(); err != nil {
		t.Fatal(err)
	}
	before := verifyKeys(t, s.Addr)
	hist := filepath.Join(t.TempDir(), "h.jsonl")
	r := dlockRun(t, "verify", "--prefix", "vt:", "--duration", "5s", "--ttl", "1s", "--redis", "redis://"+s.Addr+"/0", "--history", hist)
	if r.code != exitOK || !strings.Contains(r.stdout, "every property holds") {
		t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	for _, p := range []string{"fencing", "exclusion", "told-first", "linearizable", "liveness"} {
		if !strings.Contains(r.stdout, "PASS  "+p) {
			t.Errorf("no PASS line for %s:\n%s", p, r.stdout)
		}
	}
	if !strings.Contains(r.stdout, "seed ") {
		t.Errorf("no seed printed:\n%s", r.stdout)
	}
	if b, err := os.ReadFile(hist); err != nil || !strings.Contains(string(b), `"op":"write"`) {
		t.Errorf("history %s: %v, %d bytes, no write", hist, err, len(b))
	}
	after := verifyKeys(t, s.Addr)
	if !maps.Equal(before, after) {
		t.Errorf("keys before: %v\nafter: %v", before, after)
	}
	pages := strings.TrimSuffix(hist, ".jsonl") + "-timelines"
	if !strings.Contains(r.stdout, "timelines, a page per lock: "+pages) {
		t.Errorf("no timelines line:\n%s", r.stdout)
	}
	if m, _ := filepath.Glob(filepath.Join(pages, "timeline-vt*.html")); len(m) == 0 {
		t.Errorf("no timeline page in %s", pages)
	}
}

// TestVerifyOnConsensusStores runs dlock verify on etcd, PostgreSQL and
// ZooKeeper (whose connections go through its proxy): every property holds,
// and nothing is left under the prefix.
func TestVerifyOnConsensusStores(t *testing.T) {
	for _, tc := range []struct{ name, flag string }{{"etcd", "--etcd"}, {"postgres", "--postgres"}, {"zookeeper", "--zk"}} {
		t.Run(tc.name, func(t *testing.T) {
			var url string
			switch tc.name {
			case "etcd":
				url = testserver.StartEtcd(t).ClientURL
			case "postgres":
				url = testserver.StartPostgres(t).URL
			default:
				url = testserver.StartZooKeeper(t).Addr
			}
			r := dlockRun(t, "verify", "--prefix", "vt-", "--duration", "4s", "--ttl", "1s", tc.flag, url)
			if r.code != exitOK || !strings.Contains(r.stdout, "every property holds") || !strings.Contains(r.stdout, "faults: stop,kill,reset,delay") {
				t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
			}
			if left := consensusLeft(t, tc.name, url); len(left) > 0 {
				t.Errorf("left under the prefix: %v", left)
			}
		})
	}
}

// consensusLeft returns the entries of the locks named vt-* on the etcd,
// PostgreSQL or ZooKeeper at url: etcd keys, rows of the locks' table, znodes.
func consensusLeft(t *testing.T, backend, url string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var left []string
	if backend == "zookeeper" {
		conn, _, err := zk.Connect([]string{url}, 5*time.Second, zk.WithLogInfo(false))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		kids, _, err := conn.Children(zklock.DefaultRoot)
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			t.Fatal(err)
		}
		for _, k := range kids {
			if strings.HasPrefix(k, "vt-") {
				left = append(left, k)
			}
		}
		return left
	}
	if backend == "etcd" {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		resp, err := cli.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range resp.Kvs {
			if strings.Contains(string(kv.Key), "vt-") {
				left = append(left, string(kv.Key))
			}
		}
		return left
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT key FROM "+pglock.DefaultTable+" WHERE key LIKE 'vt-%'")
	if err != nil {
		t.Fatal(err)
	}
	left, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return left
}

// TestVerifyOnClusterAndRedlock runs dlock verify on a Redis Cluster (no
// proxy: its nodes redirect the clients) and on Redlock over three masters:
// every property holds, and no key is left on any server.
func TestVerifyOnClusterAndRedlock(t *testing.T) {
	t.Run("cluster", func(t *testing.T) {
		c := testserver.StartCluster(t, 3)
		r := dlockRun(t, "verify", "--prefix", "vt:", "--keys", "6", "--duration", "4s", "--ttl", "1s", "--redis", "redis://"+c.Nodes[0].Addr+"/0")
		if r.code != exitOK || !strings.Contains(r.stdout, "every property holds") || !strings.Contains(r.stdout, "faults: stop,kill,") {
			t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
		}
		for _, n := range c.Nodes {
			if left := verifyKeys(t, n.Addr); len(left) > 0 {
				t.Errorf("left on %s: %v", n.Addr, left)
			}
		}
	})
	t.Run("redlock", func(t *testing.T) {
		// Every client-side fault; seed 4 delays the requests and replies of
		// two of the three masters through their proxies by 323 ms at 0.5 s,
		// and their replies by 281 ms at 3.4 s.
		args := []string{"verify", "--prefix", "vt:", "--duration", "4s", "--ttl", "1s", "--seed", "4"}
		var masters []*testserver.Redis
		for range 3 {
			m := testserver.StartRedis(t)
			masters = append(masters, m)
			args = append(args, "--redis", "redis://"+m.Addr+"/0")
		}
		r := dlockRun(t, args...)
		if r.code != exitOK || !strings.Contains(r.stdout, "every property holds") || !strings.Contains(r.stdout, "faults: stop,kill,reset,delay") {
			t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
		}
		for _, m := range masters {
			if left := verifyKeys(t, m.Addr); len(left) > 0 {
				t.Errorf("left on %s: %v", m.Addr, left)
			}
		}
	})
}

// TestVerifyReportsViolation runs dlock verify on a Redis whose lock keys
// somebody else deletes while they are held (as a FLUSHALL or an eviction
// would): it exits 1 and prints the exclusion violation with its history.
func TestVerifyReportsViolation(t *testing.T) {
	s := testserver.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer rdb.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(300 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				// The record of the run's first lock, vt:<tag>-0.
				for _, k := range rdb.Keys(ctx, "dlock:{vt:*-0}").Val() {
					rdb.Del(ctx, k)
				}
			}
		}
	}()
	r := dlockRun(t, "verify", "--prefix", "vt:", "--keys", "1", "--duration", "5s", "--faults", "none", "--seed", "3", "--redis", "redis://"+s.Addr+"/0")
	cancel()
	<-done
	t.Logf("stdout:\n%s", r.stdout)
	if r.code != exitFailure || !strings.Contains(r.stdout, "FAIL  exclusion") || !strings.Contains(r.stdout, "=>") ||
		!strings.Contains(r.stdout, "replay the faults with --seed 3") {
		t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if left := verifyKeys(t, s.Addr); len(left) > 0 {
		t.Errorf("left: %v", left)
	}
}

// TestVerifyInterrupted interrupts dlock verify (SIGINT, as Ctrl-C): it stops
// its workers, removes everything under the prefix and exits 130.
func TestVerifyInterrupted(t *testing.T) {
	s := testserver.StartRedis(t)
	cmd := dlockCmd(t, "verify", "--prefix", "vt:", "--duration", "1m", "--ttl", "1s", "--redis", "redis://"+s.Addr+"/0")
	out := filepath.Join(t.TempDir(), "out")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd.Stdout = f
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer rdb.Close()
	waitFor(t, "a lock under the prefix", func() bool {
		keys, _ := rdb.Keys(context.Background(), "dlock:{vt:*").Result()
		return len(keys) > 0
	})
	if err := syscall.Kill(cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	b, _ := os.ReadFile(out)
	t.Logf("stdout:\n%s\nstderr:\n%s", b, stderr.String())
	if cmd.ProcessState.ExitCode() != 130 || !strings.Contains(string(b), "removed ") {
		t.Fatalf("exit %v; stdout:\n%s\nstderr:\n%s", err, b, stderr.String())
	}
	if left := verifyKeys(t, s.Addr); len(left) > 0 {
		t.Errorf("left: %v", left)
	}
}

// TestVerifyNothingGranted runs dlock verify on a Redis that refuses every
// write (out of memory): with no lock granted nothing was checked, so it exits
// 69 with the store's error instead of passing.
func TestVerifyNothingGranted(t *testing.T) {
	s := testserver.StartRedis(t, "--maxmemory", "1", "--maxmemory-policy", "noeviction")
	r := dlockRun(t, "verify", "--prefix", "vt:", "--duration", "2s", "--ttl", "1s", "--faults", "none", "--redis", "redis://"+s.Addr+"/0")
	if r.code != exitUnavailable || !strings.Contains(r.stderr, "no lock was granted") || !strings.Contains(r.stderr, "OOM") {
		t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
}

// tryLocker is what TestVerifyLeavesOthersUnderThePrefix needs of a backend's
// Client.
type tryLocker interface {
	TryLock(ctx context.Context, key string, opts ...dlock.Option) (*dlock.Lease, error)
}

// TestVerifyLeavesOthersUnderThePrefix takes a lock under the prefix of a
// running dlock verify (on Redis also a resized semaphore, an optimistic
// value and a latch; on etcd and PostgreSQL a latch): once the run ended, the
// lock is still held by its lease, another Client's TryLock is refused, and
// the other objects are still there.
func TestVerifyLeavesOthersUnderThePrefix(t *testing.T) {
	for _, backend := range []string{"redis", "etcd", "postgres", "zookeeper"} {
		t.Run(backend, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			must := func(c tryLocker, err error) tryLocker {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
				return c
			}
			var (
				flag, url string
				newc      func() tryLocker
				others    func() []string // the objects other than the lock
				rdb       *redis.Client
			)
			switch backend {
			case "redis":
				s := testserver.StartRedis(t)
				flag, url = "--redis", "redis://"+s.Addr+"/0"
				rdb = redis.NewClient(&redis.Options{Addr: s.Addr})
				defer rdb.Close()
				newc = func() tryLocker { return must(redislock.New(rdb)) }
				others = func() []string {
					var out []string
					for _, k := range []string{redislock.SizeKey("vt:sem"), redislock.ValueKey("vt:val"), redislock.LatchKey("vt:latch")} {
						if rdb.Exists(ctx, k).Val() == 1 {
							out = append(out, k)
						}
					}
					return out
				}
			case "etcd", "postgres":
				flag = "--" + backend
				if backend == "etcd" {
					url = testserver.StartEtcd(t).ClientURL
					cli, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
					if err != nil {
						t.Fatal(err)
					}
					defer cli.Close()
					newc = func() tryLocker { return must(etcdlock.New(cli)) }
				} else {
					url = testserver.StartPostgres(t).URL
					pool, err := pgxpool.New(ctx, url)
					if err != nil {
						t.Fatal(err)
					}
					defer pool.Close()
					d, err := pglock.NewDriver(pool, pglock.WithCreateTable())
					if err != nil {
						t.Fatal(err)
					}
					newc = func() tryLocker { return must(pglock.NewClient(d)) }
				}
				others = func() []string {
					r := dlockRun(t, "latch", "count", "--count", "3", flag, url, "vt:latch")
					if strings.TrimSpace(r.stdout) == "2" {
						return []string{"latch"}
					}
					return nil
				}
			default:
				flag, url = "--zk", testserver.StartZooKeeper(t).Addr
				d, err := zklock.NewDriver(ctx, []string{url})
				if err != nil {
					t.Fatal(err)
				}
				defer d.Close()
				newc = func() tryLocker { return must(zklock.NewClient(d)) }
				others = func() []string { return nil }
			}

			out := filepath.Join(t.TempDir(), "out")
			f, err := os.Create(out)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			cmd := dlockCmd(t, "verify", "--prefix", "vt:", "--duration", "3s", "--ttl", "1s", "--faults", "none", flag, url)
			cmd.Stdout = f
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// Its check that nothing is held under the prefix is behind it.
			waitFor(t, "the run's start", fileHas(out, "dlock verify on "))
			lease, err := newc().TryLock(ctx, "vt:user", dlock.WithTTL(10*time.Second), dlock.WithAutoRenew(true))
			if err != nil {
				t.Fatal(err)
			}
			defer lease.Unlock(context.Background())
			var want []string
			if rdb != nil {
				if r := dlockRun(t, "semaphore", "resize", flag, url, "vt:sem", "3"); r.code != exitOK {
					t.Fatalf("resize: exit %d, stderr %q", r.code, r.stderr)
				}
				o, err := redislock.NewOptimistic(rdb, time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := o.CompareAndSet(ctx, "vt:val", 0, "v"); err != nil {
					t.Fatal(err)
				}
				want = append(want, redislock.SizeKey("vt:sem"), redislock.ValueKey("vt:val"))
			}
			if backend != "zookeeper" {
				if r := dlockRun(t, "latch", "count-down", "--count", "3", flag, url, "vt:latch"); r.code != exitOK {
					t.Fatalf("latch count-down: exit %d, stderr %q", r.code, r.stderr)
				}
				if rdb != nil {
					want = append(want, redislock.LatchKey("vt:latch"))
				} else {
					want = append(want, "latch")
				}
			}
			err = cmd.Wait()
			b, _ := os.ReadFile(out)
			if cmd.ProcessState.ExitCode() != exitOK || !strings.Contains(string(b), "every property holds") {
				t.Errorf("dlock verify: %v; stdout:\n%s\nstderr:\n%s", err, b, stderr.String())
			}
			if err := lease.Extend(ctx, 10*time.Second); err != nil || lease.Err() != nil {
				t.Errorf("the user's lease after the run: Extend %v, Err %v", err, lease.Err())
			}
			if other, err := newc().TryLock(ctx, "vt:user"); !errors.Is(err, dlock.ErrNotObtained) {
				t.Errorf("another Client's TryLock of the user's lock: %v, want ErrNotObtained", err)
				if other != nil {
					_ = other.Unlock(ctx)
				}
			}
			if got := others(); !slices.Equal(got, want) {
				t.Errorf("after the run: %v, want %v", got, want)
			}
		})
	}
}
