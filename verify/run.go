package verify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock/etcdlock"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/memlock"
	"github.com/dlock-go/dlock/pglock"
	"github.com/dlock-go/dlock/redislock"
	"github.com/dlock-go/dlock/zklock"
	"github.com/go-zookeeper/zk"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Faults the nemesis injects.
const (
	FaultStop     = "stop"     // SIGSTOP a worker, SIGCONT it later
	FaultKill     = "kill"     // SIGKILL a worker (it is started again)
	FaultCrash    = "crash"    // SIGKILL the lock store and start it again
	FaultSnapshot = "snapshot" // with RDB, a crash's snapshot shortly before it
	FaultFailover = "failover" // cut replication, kill the primary, promote the lagging replica
	// FaultReset cuts every connection between the workers and the lock
	// store (through the proxies they dial).
	FaultReset = "reset"
	// FaultDelay holds back what flows between the workers and the store
	// (requests, replies, or both; on Redlock, the traffic of some of the
	// masters) by a few milliseconds up to a third of the TTL, for a while;
	// then it heals.
	FaultDelay = "delay"
	// FaultBlackhole stops every byte between the workers and the store (on
	// Redlock and etcd, some of the masters or members: a minority or a
	// majority) for between a quarter of the TTL and twice the TTL; the
	// connections stay open, and new ones are accepted but get nothing. Then
	// it heals.
	FaultBlackhole = "blackhole"
	// FaultExpire black-holes the workers' ZooKeeper connections for longer
	// than the session timeout, so that the server expires their sessions.
	FaultExpire = "expire"
	// FaultPartition cuts one etcd member off for a while: the traffic of
	// the connections dialled to it, its peers' and the workers', is
	// black-holed in both directions (connections it dials to the others
	// are not: the cut is of what reaches and leaves it through its own
	// addresses).
	FaultPartition = "partition"
	// FaultTerminate ends every client connection of PostgreSQL (pg_terminate_backend).
	FaultTerminate = "terminate"
	// FaultForce force-unlocks a held key through the backend's Inspector,
	// over a connection of the test process's own to the store (not
	// through the proxies), as an operator's dlock unlock --force does: the
	// event names the key and the holding the store removed (Token, Owner).
	FaultForce = "force"
)

// Config is one run: a workload on one backend under a seeded nemesis.
type Config struct {
	Spec     Spec // the workers' template (Lock, Resource, Dir, Proc, Seed are set by Run)
	Workers  int
	Duration time.Duration
	Seed     uint64
	Faults   []string // the nemesis's repertoire (none: no faults)
	Persist  string   // the lock store's persistence: "" (none), rdb, aof
	Replica  bool     // a primary and a replica, and failover through a proxy
	Masters  int      // Redlock: the number of masters
	Bound    time.Duration
	// Server is the lock store's redis-server executable ("":
	// testserver.RedisBinary), for example a valkey-server.
	Server string
	// Topology is the Redis lock store's shape: "" (one server, or Masters
	// for Redlock), TopologySentinel or TopologyCluster.
	Topology string
	// Healed: after the nemesis ends, the workload goes on without faults
	// for twice the TTL plus the store's recovery allowance plus Bound, so
	// that the recovery checker sees waiters served once the faults healed
	// (not where the allowance is longer than a second: the fair,
	// reentrant and read-write locks on Redis, etcd).
	Healed bool
	// ForceGap: on a single Redis server, each FaultForce drops the
	// workers' subscription connections (CLIENT KILL TYPE pubsub) in the
	// same write as the force's publish of the loss, which so reaches no
	// holder: each must find the loss when its subscription is set up again
	// (its Client checks its holdings then) and be told at once all the
	// same, so the drop is not recorded as a fault that excuses anything.
	ForceGap bool
	// Told is told-at-once's bound (0: ToldBound of the TTL).
	Told time.Duration
}

// Redis topologies of the lock store (Config.Topology, Spec.Topology).
const (
	// TopologySentinel is a primary and a replica watched by three Sentinels;
	// workers follow the primary through them, and FaultFailover kills the
	// primary and lets the Sentinels promote the lagging replica.
	TopologySentinel = "sentinel"
	// TopologyCluster is a Redis Cluster of three masters (each with a
	// replica when FaultCrash is among the faults: the crash kills a master
	// and its replica takes over).
	TopologyCluster = "cluster"
)

// Result is what a run found.
type Result struct {
	History    []Event
	Violations []Violation
	Stats      Stats
	Leftover   []string // keys left on the lock store after everything ended
	Dir        string
	Elapsed    time.Duration
}

// unsafeFaults are the faults the docs name as breaking exclusion on Redis.
var unsafeFaults = map[string]bool{FaultCrash: true, FaultFailover: true}

// store is the lock store of a run: its servers and the addresses workers dial.
type store struct {
	servers []*testserver.Redis
	replica *testserver.Redis
	proxy   *Proxy // the single Redis's (a failover points it at the replica)
	// proxies stand between the workers and each server they dial (in
	// st.addrs's order), peers between etcd's members (one per member).
	proxies, peers []*Proxy
	etcd           *testserver.EtcdCluster
	zk             *testserver.ZooKeeper
	pg             *testserver.Postgres
	addrs          []string

	sentinels []*testserver.Sentinel
	// shards are the cluster's masters, each followed by its replicas.
	shards [][]*testserver.Redis

	legacy bool // the legacy timestamp protocol's store: keys without expiry

	mem *memlock.Store // memlock: the store the in-process workers share
}

func startStore(t testing.TB, c Config) *store {
	st := &store{legacy: c.Spec.Backend == "legacy"}
	switch c.Spec.Backend {
	case "memlock":
		return st
	case "postgres":
		st.pg = testserver.StartPostgres(t)
		px := st.proxyTo(t, st.pg.Addr)
		st.addrs = []string{strings.Replace(st.pg.URL, st.pg.Addr, px.Addr(), 1)}
		return st
	case "zookeeper":
		st.zk = testserver.StartZooKeeper(t)
		st.addrs = []string{st.zk.Addr}
		st.proxify(t)
		return st
	case "etcd":
		st.etcd = testserver.StartEtcdClusterWith(t, 3, testserver.EtcdClusterOptions{
			PeerAddr: func(i int, listen string) (string, error) {
				px, err := NewProxy(listen)
				if err != nil {
					return "", err
				}
				t.Cleanup(px.Close)
				st.peers = append(st.peers[:i], px) // a start tried again replaces the last try's
				return px.Addr(), nil
			}})
		st.addrs = st.etcd.Endpoints()
		st.proxify(t)
		return st
	}
	var extra []string
	switch c.Persist {
	case "rdb":
		extra = []string{"--save", "3600 1"}
	case "aof":
		extra = []string{"--appendonly", "yes", "--appendfsync", "everysec"}
	}
	startRedis := func(args ...string) *testserver.Redis {
		if c.Server != "" {
			return testserver.StartRedisBinary(t, c.Server, args...)
		}
		return testserver.StartRedis(t, args...)
	}
	if c.Topology == TopologyCluster {
		replicas := 0
		if slices.Contains(c.Faults, FaultCrash) {
			replicas = 1
		}
		cl := testserver.StartClusterWithReplicas(t, 3, replicas)
		for i, m := range cl.Nodes {
			st.shards = append(st.shards, append([]*testserver.Redis{m}, cl.Replicas[i]...))
		}
		st.addrs = cl.Addrs()
		return st
	}
	if c.Replica || c.Topology == TopologySentinel {
		auth := []string{"--user", "repl", "on", ">replpw", "~*", "&*", "+@all", "--masteruser", "repl", "--masterauth", "replpw"}
		p := startRedis(append(extra, auth...)...)
		r := startRedis(append(append(extra, auth...), "--replicaof", "127.0.0.1", fmt.Sprint(p.Port))...)
		st.servers, st.replica = []*testserver.Redis{p}, r
		if c.Topology == TopologySentinel {
			waitReplica(t, p.Addr)
			st.sentinels = testserver.StartSentinelsDownAfter(t, p, 3, 2*time.Second)
			for _, s := range st.sentinels {
				st.addrs = append(st.addrs, s.Addr)
			}
			return st
		}
		st.proxy = st.proxyTo(t, p.Addr)
		st.addrs = []string{st.proxy.Addr()}
		waitReplica(t, p.Addr)
		return st
	}
	n := max(c.Masters, 1)
	for range n {
		s := startRedis(extra...)
		st.servers = append(st.servers, s)
		st.addrs = append(st.addrs, s.Addr)
	}
	st.proxify(t) // the workers dial through proxies that inject the network's faults
	if n == 1 {
		st.proxy = st.proxies[0]
	}
	return st
}

// proxyTo starts a proxy to target, adds it to st.proxies and closes it at the
// end of the test.
func (st *store) proxyTo(t testing.TB, target string) *Proxy {
	px, err := NewProxy(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(px.Close)
	st.proxies = append(st.proxies, px)
	return px
}

// proxify puts a proxy in front of each address of st.addrs, which the
// workers dial instead.
func (st *store) proxify(t testing.TB) {
	for i, a := range st.addrs {
		st.addrs[i] = st.proxyTo(t, a).Addr()
	}
}

// waitReplica waits until the primary at addr has a replica online.
func waitReplica(t testing.TB, addr string) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	testserver.Eventually(t, 10*time.Second, "the replica is in sync", func() bool {
		s, _ := rdb.Info(context.Background(), "replication").Result()
		return strings.Contains(s, "state=online")
	})
}

// Run runs c: it starts the servers, the workers and the nemesis, stops them
// after c.Duration, and checks the history. A failing run logs its seed.
func Run(t testing.TB, c Config) *Result {
	t.Helper()
	start := time.Now()
	dir := t.TempDir()
	res := &Result{Dir: dir}
	resource := testserver.StartRedis(t)
	st := startStore(t, c)
	spec := c.Spec
	spec.Lock, spec.Resource, spec.Dir, spec.Seed = st.addrs, resource.Addr, dir, c.Seed
	spec.Topology = c.Topology
	if spec.Backend == "memlock" {
		spec.mem = memlock.NewStore()
		st.mem = spec.mem
	}
	rec, err := NewRecorder(filepath.Join(dir, "nemesis.jsonl"), -1)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()

	ctx, cancel := context.WithCancel(context.Background())
	ws := &workers{procs: procs{pids: make([]int, c.Workers), rec: rec}, spec: spec}
	var wg sync.WaitGroup
	for i := range c.Workers {
		wg.Add(1)
		go func() { defer wg.Done(); ws.keep(ctx, t, i) }()
	}
	nctx, ncancel := context.WithCancel(context.Background())
	var nwg sync.WaitGroup
	if len(c.Faults) > 0 {
		nwg.Add(1)
		go func() { defer nwg.Done(); nemesis(nctx, t, c, st, ws, rec) }()
	}
	if c.Spec.Resize {
		nwg.Add(1)
		go func() { defer nwg.Done(); resizer(nctx, t, c, st, rec) }()
	}
	// The Sentinels' watch outlives the nemesis: a failover it began may
	// end after the workload's time.
	wctx, wcancel := context.WithCancel(context.Background())
	var wwg sync.WaitGroup
	if st.sentinels != nil {
		wwg.Add(1)
		go func() { defer wwg.Done(); watchSentinels(wctx, st.sentinels[0], rec) }()
	}
	// What a fault leaves on the store (beyond its TTL) is gone this long
	// after it healed: the leftover check's grace, and the recovery
	// checker's allowance.
	grace := time.Second
	switch {
	case st.etcd != nil:
		// The mark of an abandoned acquisition lives its TTL plus the
		// request timeout (in whole seconds), and a leader change renews
		// every lease (etcd refreshes them on election).
		grace = etcdlock.DefaultRequestTimeout + 2*time.Second
	case spec.Backend == "redis" && spec.Kind != "plain":
		// A queue entry of a waiter that died, and a lock handed over to
		// one, stay FairWaiterTTL.
		grace += redislock.FairWaiterTTL
	}
	time.Sleep(c.Duration) // the workload runs; everything is awaited below
	ncancel()
	nwg.Wait()
	if c.Healed && len(c.Faults) > 0 && grace <= time.Second {
		// The workload goes on without faults, long enough for the
		// recovery checker to see the store serve waiters again.
		time.Sleep(2*c.Spec.TTL + grace + c.Bound)
	}
	wcancel()
	wwg.Wait()
	cancel()
	ws.stopAll()
	wg.Wait()
	finalReads(rec, &redis.Options{Addr: resource.Addr}, spec.Keys)

	// Liveness: once everything has ended and a TTL has passed, nothing of the
	// locks is left on the store but the fence counters, which outlive them
	// by design.
	time.Sleep(c.Spec.TTL + c.Spec.LockDelay)
	for deadline := time.Now().Add(grace); ; {
		res.Leftover = st.leftover(t)
		if len(res.Leftover) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // polling the store's expiry
	}
	if spec.mem != nil {
		infos, err := driver.List(context.Background(), spec.mem, "*")
		if err != nil {
			t.Errorf("verify: listing the memlock store: %v", err)
		}
		for _, in := range infos {
			res.Leftover = append(res.Leftover, in.Key)
		}
	}
	h, err := ReadHistory(dir)
	if err != nil {
		t.Fatal(err)
	}
	res.History = h
	unsafe := unsafeFaults
	if spec.Backend == "etcd" || spec.Backend == "zookeeper" || spec.Backend == "postgres" {
		unsafe = nil // etcd keeps every write of a quorum on disk: no fault excuses two holders
	}
	// No store leaves a force that came before what tells its holder to the
	// renewal (Params.LateWatch): Redis's Client checks its holdings when its
	// loss subscription is established, etcd's Driver when its loss watch
	// begins (at the watch's first revision), PostgreSQL's Driver when its
	// LISTEN starts (and each of them a holding registered after a force it
	// heard), ZooKeeper's Driver sets the watch on the holder's node when the
	// queue's child watch fired before the holding was registered, and
	// memlock tells the holder itself.
	a := Analyze(h, Params{Kind: spec.Kind, N: spec.N, TTL: spec.TTL, Bound: c.Bound, Recovery: grace, Unsafe: unsafe, Delay: spec.LockDelay, Told: c.Told,
		HTML: filepath.Join(dir, "resource.html")})
	res.Stats = a.Stats
	res.Violations = a.Check()
	if len(res.Leftover) > 0 {
		slices.Sort(res.Leftover)
		res.Violations = append(res.Violations, Violation{Checker: "liveness",
			Msg: fmt.Sprintf("keys left on the lock store after every holder ended and a TTL passed: %v", res.Leftover)})
	}
	res.Elapsed = time.Since(start)
	return res
}

// leftover returns what is left of the locks on the store: keys (but those
// retained by design) and, on etcd, leases.
func (st *store) leftover(t testing.TB) []string {
	var left []string
	bg := context.Background()
	if st.etcd != nil {
		return st.etcdLeftover(t)
	}
	if st.zk != nil {
		return st.zkLeftover(t)
	}
	if st.pg != nil {
		return st.pgLeftover(t)
	}
	addrs := st.addrs
	switch {
	case st.servers != nil: // directly, not through the proxies; with a replica, the primary of the moment
		addrs = nil
		for _, s := range st.servers {
			addrs = append(addrs, s.Addr)
		}
	case st.shards != nil: // every node: each lists the keys of its slots
		addrs = nil
		for _, sh := range st.shards {
			addrs = append(addrs, sh[0].Addr)
		}
	}
	for _, a := range addrs {
		rdb := redis.NewClient(&redis.Options{Addr: a})
		keys, err := rdb.Keys(bg, "*").Result()
		if err != nil {
			t.Errorf("verify: scanning the lock store: %v", err)
		}
		for _, k := range keys {
			if !retained(k) && !(st.legacy && staleStamp(rdb, k)) {
				left = append(left, k)
			}
		}
		rdb.Close()
	}
	return left
}

// etcdLeftover lists the keys and leases on the etcd cluster.
func (st *store) etcdLeftover(t testing.TB) []string {
	var left []string
	bg := context.Background()
	cli, err := clientv3.New(clientv3.Config{Endpoints: st.etcd.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Errorf("verify: etcd client: %v", err)
		return nil
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Errorf("verify: listing etcd: %v", err)
		return nil
	}
	for _, kv := range resp.Kvs {
		if kv.Lease == 0 && strings.HasPrefix(string(kv.Key), etcdlock.Prefix+"delay/") {
			continue // a lock-delay marker that no acquisition has seen yet: kept by design
		}
		left = append(left, string(kv.Key))
	}
	ls, err := cli.Leases(ctx)
	if err != nil {
		t.Errorf("verify: listing etcd leases: %v", err)
		return left
	}
	for _, l := range ls.Leases {
		left = append(left, fmt.Sprintf("lease %x", l.ID))
	}
	return left
}

// zkLeftover lists the ephemeral znodes (holdings and queue entries) left under
// the locks' root.
func (st *store) zkLeftover(t testing.TB) []string {
	conn, _, err := zk.Connect([]string{st.zk.Addr}, 5*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Errorf("verify: connecting to ZooKeeper: %v", err)
		return nil
	}
	defer conn.Close()
	var left []string
	var walk func(path string)
	walk = func(path string) {
		kids, _, err := conn.Children(path)
		if err != nil {
			return
		}
		for _, k := range kids {
			p := path + "/" + k
			if _, stat, err := conn.Get(p); err == nil && stat.EphemeralOwner != 0 {
				left = append(left, p)
			}
			walk(p)
		}
	}
	walk(zklock.DefaultRoot)
	return left
}

// pgLeftover lists the rows of locks and semaphore permits still held
// (expired rows stay until the next acquisition of their key takes them over:
// they hold nothing).
func (st *store) pgLeftover(t testing.TB) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, st.pg.URL)
	if err != nil {
		t.Errorf("verify: connecting to PostgreSQL: %v", err)
		return nil
	}
	defer conn.Close(ctx)
	var keys []string
	for _, table := range []string{pglock.DefaultTable, pglock.DefaultTable + "_sem"} { // the locks', the semaphores'
		var there bool
		if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&there); err != nil || !there {
			continue // a kind of lock the run did not use
		}
		rows, err := conn.Query(ctx, "SELECT key FROM "+table+" WHERE owner <> '' AND expires_at > clock_timestamp()")
		if err != nil {
			t.Errorf("verify: reading the locks' table: %v", err)
			return nil
		}
		held, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Errorf("verify: reading the locks' table: %v", err)
		}
		keys = append(keys, held...)
	}
	return keys
}

// staleStamp reports whether the legacy lock key k holds a stamp (ms since
// the epoch) that has run out: the protocol's keys have no expiry (as in the
// recipes it speaks), so a holder that died holding leaves its key, which
// holds nothing once its stamp has passed, until the next acquisition takes
// it over.
func staleStamp(rdb *redis.Client, k string) bool {
	v, err := rdb.Get(context.Background(), k).Int64()
	return err == nil && v < time.Now().UnixMilli()
}

// retained reports whether key is one that outlives its locks by design: a
// fence counter (redislock, Redlock), a resized semaphore's size, or a legacy
// lock's companion hash, which keeps the fencing counter for FenceRetention.
func retained(key string) bool {
	return strings.HasSuffix(key, ":fence") || strings.HasSuffix(key, ":size") ||
		strings.HasPrefix(key, "{") && strings.HasSuffix(key, "}:dlock")
}

// Report fails t with every violation (and the seed that replays the run)
// unless there is none.
func (r *Result) Report(t testing.TB, seed uint64) {
	t.Helper()
	if len(r.Violations) == 0 {
		return
	}
	path := filepath.Join(os.TempDir(), fmt.Sprintf("dlock-verify-%s-seed%d.jsonl", strings.ReplaceAll(t.Name(), "/", "_"), seed))
	_ = WriteHistory(path, r.History)
	for _, v := range r.Violations {
		t.Error(v.Format(r.History))
	}
	t.Errorf("history: %s (replay: go test -run '^%s$' -seed %d)", path, t.Name(), seed)
}

// workers keeps c.Workers worker processes running, starting one again when it
// exits (a holder that exited without releasing, or one killed).
type workers struct {
	procs
	spec Spec
}

// keep runs worker i, again each time it exits, until ctx ends.
func (ws *workers) keep(ctx context.Context, t testing.TB, i int) {
	if ws.spec.mem != nil { // memlock: a goroutine, sharing the store
		s := ws.spec
		s.Proc = i
		if err := RunWorker(ctx, s); err != nil {
			t.Error(err)
		}
		return
	}
	for life := 0; ctx.Err() == nil; life++ {
		s := ws.spec
		s.Proc, s.Life = i, life
		b, _ := json.Marshal(s)
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), WorkerEnv+"="+string(b))
		logs, err := os.OpenFile(filepath.Join(s.Dir, fmt.Sprintf("w%02d.log", i)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			t.Error(err)
			return
		}
		cmd.Stdout, cmd.Stderr = logs, logs
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		from := logSize(logs)
		ws.mu.Lock()
		if ws.stop {
			ws.mu.Unlock()
			logs.Close()
			return
		}
		err = cmd.Start()
		if err == nil {
			ws.pids[i] = cmd.Process.Pid
		}
		ws.mu.Unlock()
		if err != nil {
			logs.Close()
			t.Error(err)
			return
		}
		err = cmd.Wait()
		logs.Close()
		ws.exited(i, err, logs.Name(), from)
		ws.mu.Lock()
		ws.pids[i] = 0
		ws.mu.Unlock()
	}
}

// nemesis injects c.Faults at random, from c.Seed, until ctx ends; every fault
// is healed before it returns.
func nemesis(ctx context.Context, t testing.TB, c Config, st *store, ws *workers, rec *Recorder) {
	rng := rand.New(rand.NewPCG(c.Seed, 0x6e656d))
	ttl := c.Spec.TTL
	sleep := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	// between draws from [lo, hi] (lo when the range is empty: a TTL too
	// short for the fault's floor).
	between := func(lo, hi time.Duration) time.Duration {
		return lo + time.Duration(rng.Int64N(int64(max(hi-lo, 0))+1))
	}
	// takeover records fault f around do, a replica taking over from its
	// primary: failed when do found no replica in sync. It reports false
	// when the nemesis must end.
	takeover := func(f, what string, do func() error) bool {
		rec.Record(Event{Op: OpNemesis, Type: Invoke, Fault: f, Target: -1})
		if err := do(); errors.Is(err, errNoReplica) {
			rec.Record(Event{Op: OpNemesis, Type: Fail, Fault: f, Target: -1})
			return true
		} else if err != nil {
			t.Errorf("verify: %s: %v", what, err)
			return false
		}
		rec.Record(Event{Op: OpNemesis, Type: OK, Fault: f, Target: -1})
		return true
	}
	force, closeForce, err := forceInspector(c, st)
	if err != nil {
		t.Errorf("verify: the force-unlocking inspector: %v", err)
		return
	}
	defer closeForce()
	for sleep(between(ttl/2, 2*ttl)) {
		// Every draw is made each round, used or not, so that a seed
		// replays the same choices whatever the processes did.
		f := c.Faults[rng.IntN(len(c.Faults))]
		target := rng.IntN(c.Workers)
		long, short, lag := between(ttl/2, 2*ttl), between(0, ttl/2), between(ttl/8, ttl/3)
		pick := rng.IntN(max(len(st.servers), len(st.shards), len(st.peers), 1))
		up, down := delays(rng.IntN(3), between(2*time.Millisecond, ttl/3))
		hole, expire := between(ttl/4, 2*ttl), between(3*ttl/2, 5*ttl/2)
		cut := cutNodes(rng, len(st.proxies)) // the nodes a delay or a black hole hits
		switch f {
		case FaultStop:
			if !ws.signal(target, syscall.SIGSTOP) {
				continue
			}
			rec.Record(Event{Op: OpNemesis, Type: Invoke, Fault: f, Target: target})
			time.Sleep(long) // a pause past the TTL, or not
			ws.signal(target, syscall.SIGCONT)
			rec.Record(Event{Op: OpNemesis, Type: OK, Fault: f, Target: target})
		case FaultReset:
			if st.proxies == nil {
				continue
			}
			rec.Record(Event{Op: OpNemesis, Type: Invoke, Fault: f, Target: -1})
			for _, p := range st.proxies {
				p.Reset()
			}
			rec.Record(Event{Op: OpNemesis, Type: OK, Fault: f, Target: -1})
		case FaultDelay, FaultBlackhole, FaultExpire:
			if st.proxies == nil || f == FaultExpire && st.zk == nil {
				continue
			}
			d, ps := hole, pickProxies(st.proxies, cut)
			switch f {
			case FaultDelay:
				d = long
			case FaultExpire:
				d, ps = expire, st.proxies
			}
			e := Event{Op: OpNemesis, Fault: f, Target: -1, Nodes: cut}
			if f == FaultDelay {
				e.Delay, e.ReplyDelay = up, down
			}
			e.Type = Invoke
			rec.Record(e)
			for _, p := range ps {
				if f == FaultDelay {
					p.SetDelay(up, down)
				} else {
					p.SetBlackhole(true)
				}
			}
			time.Sleep(d) // the fault lasts; healed below
			for _, p := range ps {
				p.Heal()
			}
			e.Type = OK
			rec.Record(e)
		case FaultPartition:
			if st.peers == nil {
				continue
			}
			e := Event{Op: OpNemesis, Type: Invoke, Fault: f, Target: -1, Nodes: []int{pick}}
			rec.Record(e)
			st.peers[pick].SetBlackhole(true)
			st.proxies[pick].SetBlackhole(true)
			time.Sleep(hole) // the member is cut off; healed below
			st.peers[pick].Heal()
			st.proxies[pick].Heal()
			e.Type = OK
			rec.Record(e)
		case FaultForce:
			// Drawn here, so that the other faults' draws stay those of a
			// repertoire without it.
			if force == nil || !forceHeld(ctx, force, c.Spec.Keys, rng.IntN(len(c.Spec.Keys)), rec) {
				continue
			}
		case FaultTerminate:
			if st.pg == nil {
				continue
			}
			rec.Record(Event{Op: OpNemesis, Type: Invoke, Fault: f, Target: -1})
			if err := terminateBackends(st.pg.URL); err != nil {
				t.Errorf("verify: pg_terminate_backend: %v", err)
				return
			}
			rec.Record(Event{Op: OpNemesis, Type: OK, Fault: f, Target: -1})
		case FaultKill:
			rec.Record(Event{Op: OpNemesis, Type: Invoke, Fault: f, Target: target})
			ws.signal(target, syscall.SIGKILL)
			rec.Record(Event{Op: OpNemesis, Type: OK, Fault: f, Target: target})
		case FaultCrash:
			if st.pg != nil {
				rec.Record(Event{Op: OpNemesis, Type: Invoke, Fault: f, Target: -1})
				if err := st.pg.Restart(); err != nil {
					t.Errorf("verify: restarting PostgreSQL: %v", err)
					return
				}
				rec.Record(Event{Op: OpNemesis, Type: OK, Fault: f, Target: -1})
				continue
			}
			if st.zk != nil {
				rec.Record(Event{Op: OpNemesis, Type: Invoke, Fault: f, Target: -1})
				st.zk.Stop()
				time.Sleep(short)
				if err := st.zk.Start(); err != nil {
					t.Errorf("verify: restarting ZooKeeper: %v", err)
					return
				}
				rec.Record(Event{Op: OpNemesis, Type: OK, Fault: f, Target: -1})
				continue
			}
			if st.etcd != nil {
				// The leader killed and started again: the others elect
				// one meanwhile, and it rejoins from its WAL.
				lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
				l, err := st.etcd.Leader(lctx)
				lcancel()
				if err != nil {
					continue
				}
				rec.Record(Event{Op: OpNemesis, Type: Invoke, Fault: f, Target: -1})
				l.Stop()
				time.Sleep(long)
				if err := l.Restart(); err != nil {
					t.Errorf("verify: restarting the etcd leader: %v", err)
					return
				}
				rec.Record(Event{Op: OpNemesis, Type: OK, Fault: f, Target: -1})
				continue
			}
			if st.shards != nil {
				if !takeover(f, "cluster master crash", func() error { return st.clusterCrash(pick) }) {
					return
				}
				continue
			}
			s := st.servers[pick]
			if c.Persist == "rdb" {
				// A snapshot shortly before the crash: the restart goes
				// back to a state some grants ago, whose records are still
				// within their TTL.
				if err := snapshot(s.Addr); err != nil {
					t.Errorf("verify: snapshot: %v", err)
					return
				}
				rec.Record(Event{Op: OpNemesis, Type: Invoke, Fault: FaultSnapshot, Target: -1})
				rec.Record(Event{Op: OpNemesis, Type: OK, Fault: FaultSnapshot, Target: -1})
				time.Sleep(lag)
			}
			rec.Record(Event{Op: OpNemesis, Type: Invoke, Fault: f, Target: -1})
			s.Stop()
			time.Sleep(short)
			if err := s.Start(); err != nil {
				t.Errorf("verify: restarting the lock store: %v", err)
				return
			}
			rec.Record(Event{Op: OpNemesis, Type: OK, Fault: f, Target: -1})
		case FaultFailover:
			if st.replica == nil {
				continue
			}
			if !takeover(f, "failover", func() error { return failover(st, lag) }) {
				return
			}
		}
	}
}

// delays returns the delays of requests and replies that a FaultDelay of d
// sets: both ways (dir 0), requests only (1) or replies only (2).
func delays(dir int, d time.Duration) (up, down time.Duration) {
	switch dir {
	case 1:
		return d, 0
	case 2:
		return 0, d
	}
	return d, d
}

// cutNodes draws the nodes (of n) that a delay or a black hole hits: all of
// one, else between one and all of them, a minority or a majority, at random.
func cutNodes(rng *rand.Rand, n int) []int {
	perm, k := rng.Perm(max(n, 1)), 1+rng.IntN(max(n, 1))
	if n <= 1 {
		return nil // the only server: no need to name it
	}
	nodes := perm[:k]
	slices.Sort(nodes)
	return nodes
}

// pickProxies returns the proxies of nodes (every one when nodes is empty).
func pickProxies(ps []*Proxy, nodes []int) []*Proxy {
	if len(nodes) == 0 {
		return ps
	}
	var out []*Proxy
	for _, n := range nodes {
		out = append(out, ps[n])
	}
	return out
}

// terminateBackends ends every other connection to the PostgreSQL at url.
func terminateBackends(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'")
	return err
}

// snapshot saves an RDB snapshot of the server at addr and waits until it is
// written.
func snapshot(addr string) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	bg := context.Background()
	before, err := rdb.LastSave(bg).Result()
	if err != nil {
		return err
	}
	if err := rdb.Save(bg).Err(); err != nil {
		return err
	}
	if after, err := rdb.LastSave(bg).Result(); err != nil || after < before {
		return fmt.Errorf("no snapshot written (%v)", err)
	}
	return nil
}

// errNoReplica is the error of a failover that found no replica in sync.
var errNoReplica = errors.New("no replica in sync")

// failover cuts the replica's link (its replication user switched off and its
// connections killed), lets the primary take writes for lag, kills the primary,
// promotes the replica and points the proxy at it (with Sentinels: waits until
// they have promoted it); the old primary comes back empty as the new
// primary's replica.
func failover(st *store, lag time.Duration) error {
	p, r := st.servers[0], st.replica
	bg := context.Background()
	prdb := redis.NewClient(&redis.Options{Addr: p.Addr})
	defer prdb.Close()
	if s, _ := prdb.Info(bg, "replication").Result(); !strings.Contains(s, "state=online") {
		return errNoReplica // the replica of the last failover is still syncing
	}
	if err := prdb.Do(bg, "ACL", "SETUSER", "repl", "off").Err(); err != nil {
		return err
	}
	if err := prdb.Do(bg, "CLIENT", "KILL", "USER", "repl").Err(); err != nil {
		return err
	}
	time.Sleep(lag) // the primary grants what the replica will never see
	p.Stop()
	if st.sentinels != nil {
		if err := promoted(st.sentinels[0], r.Port); err != nil {
			return err
		}
	} else {
		rrdb := redis.NewClient(&redis.Options{Addr: r.Addr})
		defer rrdb.Close()
		if err := rrdb.Do(bg, "REPLICAOF", "NO", "ONE").Err(); err != nil {
			return err
		}
		st.proxy.SetTarget(r.Addr)
	}
	if err := p.Start(); err != nil {
		return err
	}
	if err := prdb.Do(bg, "REPLICAOF", "127.0.0.1", fmt.Sprint(r.Port)).Err(); err != nil {
		return err
	}
	st.servers[0], st.replica = r, p
	return nil
}

// promoted waits until the Sentinel s names the server on port as the primary.
func promoted(s *testserver.Sentinel, port int) error {
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr})
	defer sc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		a, err := sc.GetMasterAddrByName(ctx, s.MasterName).Result()
		if err == nil && len(a) == 2 && a[1] == fmt.Sprint(port) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the Sentinels did not promote the replica on port %d: %v", port, err)
		case <-time.After(50 * time.Millisecond): // polling the Sentinel's view
		}
	}
}

// clusterCrash kills the master of shard i, waits until its replica has taken
// its slots over, and starts it again: it comes back empty and becomes the new
// master's replica.
func (st *store) clusterCrash(i int) error {
	sh := st.shards[i]
	if len(sh) < 2 {
		return errNoReplica
	}
	m, r := sh[0], sh[1]
	bg := context.Background()
	rrdb := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer rrdb.Close()
	if s, _ := rrdb.Info(bg, "replication").Result(); !strings.Contains(s, "master_link_status:up") || !strings.Contains(s, "master_sync_in_progress:0") {
		return errNoReplica // the replica of the last crash is still syncing
	}
	m.Stop()
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	for {
		s, _ := rrdb.Info(ctx, "replication").Result()
		if strings.Contains(s, "role:master") {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the replica on %s did not take over", r.Addr)
		case <-time.After(50 * time.Millisecond): // polling the cluster's failover
		}
	}
	if err := m.Start(); err != nil {
		return err
	}
	st.shards[i] = append([]*testserver.Redis{r, m}, sh[2:]...)
	return nil
}

// sentinelTarget is the target of the failovers watchSentinels records: the
// store, as for the nemesis's (-1), under a key of their own.
const sentinelTarget = -2

// watchSentinels records every failover the Sentinels go through, those the
// nemesis asks for and those they start on their own (a primary slow to
// answer on a loaded host), as a failover fault: from the Sentinel s's +sdown
// of the primary until, after +switch-master, the old primary takes no writes
// (it is a replica, or down). A primary back (-sdown) with no switch closes
// the fault a failover timeout later: a failover may be under way still.
func watchSentinels(ctx context.Context, s *testserver.Sentinel, rec *Recorder) {
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr})
	defer sc.Close()
	ps := sc.PSubscribe(ctx, "+sdown", "-sdown", "+switch-master")
	defer ps.Close()
	open := false
	var back <-chan time.Time // the primary is back: the fault ends unless it switches
	event := func(typ string) {
		rec.Record(Event{Op: OpNemesis, Type: typ, Fault: FaultFailover, Target: sentinelTarget})
		open = typ == Invoke
	}
	for {
		select {
		case <-ctx.Done():
			if open {
				event(OK)
			}
			return
		case <-back:
			back = nil
			if open {
				event(OK)
			}
		case m, ok := <-ps.Channel():
			if !ok {
				return
			}
			f := strings.Fields(m.Payload)
			switch {
			case m.Channel == "+sdown" && len(f) > 0 && f[0] == "master" && !open:
				event(Invoke)
			case m.Channel == "-sdown" && len(f) > 0 && f[0] == "master" && open:
				back = time.After(10 * time.Second) // the Sentinels' failover-timeout
			case m.Channel == "+switch-master" && len(f) == 5:
				if !open {
					event(Invoke)
				}
				back = nil
				demoted(ctx, net.JoinHostPort(f[1], f[2]))
				event(OK)
			}
		}
	}
}

// demoted waits (10 s at most) until the server at addr is not a primary: a
// replica, or down.
func demoted(ctx context.Context, addr string) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		info, err := rdb.Info(ctx, "replication").Result()
		if err != nil || !strings.Contains(info, "role:master") {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond): // polling the Sentinels' reconfiguration
		}
	}
}
