package verify

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/redis/go-redis/v9"
)

// backend is one lock store of the suite: everything the tests know of it,
// in one entry, each store's in a file of its own (store_NAME_test.go) that
// registers it. Adding a backend is adding such a file.
type backend struct {
	name string // Spec.Backend
	// faults are the store faults it takes, beyond the workers' and the
	// network's that every store with proxies takes (FaultStop, FaultKill,
	// FaultReset, FaultDelay, FaultBlackhole): those fault handles, and
	// FaultForce when inspector is set.
	faults []string
	// start starts the store of c for the test: its servers, the proxies
	// the workers dial through, the addresses they dial.
	start func(t testing.TB, c Config) *store
	// locker returns the Locker a worker of s uses, and the function that
	// closes its connections.
	locker func(s Spec) (dlock.Locker, func(), error)
	// inspector returns the Inspector that FaultForce unlocks through,
	// over a connection of its own straight to the store (not through the
	// proxies), and the function that closes it (nil: no force-unlocks).
	inspector func(c Config, st *store) (driver.Inspector, func(), error)
	// sync returns the latch and barrier driver of s's store (nil: none).
	sync func(s SyncSpec) (driver.SyncDriver, func(), error)
	// leftover returns what is left of the locks on the store once every
	// holder ended and a TTL passed (what is kept by design excepted).
	leftover func(t testing.TB, st *store) []string
	// fault injects store fault f (one of faults, not FaultForce), healed
	// before it returns; it reports whether it did (nil: no store faults).
	fault func(ctx context.Context, c Config, st *store, f string, d draws, rec *Recorder) (bool, error)
	// resize returns a semaphore Client over a connection of its own that
	// adopts the stored size, for Spec.Resize (nil: no resizes).
	resize func(c Config, st *store) (*dlock.Client, func(), error)
	// watch records, while the run lasts, faults the store goes through on
	// its own (nil: none).
	watch func(ctx context.Context, st *store, rec *Recorder)
	// grace is how long after it healed what a fault leaves on the store
	// (beyond its TTL) is gone: the leftover check's grace, and the
	// recovery checker's allowance (nil: a second).
	grace func(s Spec) time.Duration
	// exact: no fault excuses two holders (every write of the store is on
	// a quorum's disk); else a crash or a failover does (unsafeFaults).
	exact bool
	// tokensBack: the store hands the tokens of the grants such a fault
	// lost out again (Params.TokensBack).
	tokensBack bool
	// forceSpans: a force-unlock runs node by node (Params.ForceSpans).
	forceSpans bool
}

// backends are the registered backends, by name.
var backends = map[string]*backend{}

// registerBackend adds b to the backends; a name registered twice panics at start.
func registerBackend(b *backend) {
	if backends[b.name] != nil {
		panic("verify: backend " + b.name + " registered twice")
	}
	backends[b.name] = b
}

// backendOf returns the backend named name.
func backendOf(name string) (*backend, error) {
	if b := backends[name]; b != nil {
		return b, nil
	}
	return nil, fmt.Errorf("%w: verify: backend %q", dlock.ErrInvalid, name)
}

// store is the lock store of a run, as its backend's start made it.
type store struct {
	addrs []string // what the workers dial
	// proxies stand between the workers and each node they dial (in
	// addrs's order); the network's faults go through them.
	proxies []*Proxy
	nodes   int // how many nodes (servers, shards, members) a store fault picks from
	shared  any // in-process workers: what they share (Spec.shared); nil: worker processes
	own     any // what the backend keeps for its other functions (servers, ...)
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
	// Aim names the faults the run is for: it fails unless each had, at
	// least once, the effect it is injected for (Params.Aim).
	Aim []string
	// Resync: a Redis replica begins its full sync at once
	// (repl-diskless-sync-delay 0, not 5 s), so that a failover does not
	// find the replica of the last one still waiting to sync.
	Resync bool
	// Pace is the TTL the nemesis draws its faults from: the time between
	// them and how long each lasts (0: the workers' TTL).
	Pace time.Duration
}

// Result is what a run found.
type Result struct {
	History    []Event
	Violations []Violation
	Stats      Stats
	Leftover   []string // keys left on the lock store after everything ended
	Dir        string
	Elapsed    time.Duration
	an         *Analysis // the history's, for the timelines
}

// runScope is the testing.TB of one Run: the cleanups registered through it
// (the servers started for the run, their proxies) run when the Run returns,
// last first, rather than when the test ends, so that a test running many
// seeds (the long run's twenty) keeps one run's servers at a time.
type runScope struct {
	testing.TB
	mu       sync.Mutex
	cleanups []func()
}

// Cleanup registers f to run when the Run returns.
func (s *runScope) Cleanup(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cleanups = append(s.cleanups, f)
}

// end runs the cleanups, last first.
func (s *runScope) end() {
	s.mu.Lock()
	fs := s.cleanups
	s.cleanups = nil
	s.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

// unsafeFaults are the faults the docs name as breaking exclusion on Redis.
var unsafeFaults = map[string]bool{FaultCrash: true, FaultFailover: true, FaultPowerLoss: true}

// Run runs c: it starts the servers, the workers and the nemesis, stops them
// after c.Duration, and checks the history. A failing run logs its seed.
func Run(t testing.TB, c Config) *Result {
	t.Helper()
	scope := &runScope{TB: t}
	defer scope.end()
	t = scope
	b, err := backendOf(c.Spec.Backend)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	dir := t.TempDir()
	res := &Result{Dir: dir}
	resource := testserver.StartRedis(t)
	st := b.start(t, c)
	spec := c.Spec
	spec.Lock, spec.Resource, spec.Dir, spec.Seed = st.addrs, resource.Addr, dir, c.Seed
	spec.Topology, spec.shared = c.Topology, st.shared
	rec, err := NewRecorder(filepath.Join(dir, "nemesis.jsonl"), -1)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()

	bin, err := workerBinary(spec)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ws := &procs{pids: make([]int, c.Workers), rec: rec}
	var wg sync.WaitGroup
	for i := range c.Workers {
		wg.Go(func() { keepWorker(ctx, t, ws, bin, spec, i) })
	}
	// The faults and the workload's time begin once every worker has
	// started: on a loaded host a process takes a while, and a fault before
	// any holder has nothing to bite on.
	workersStarted(dir, c.Workers, 30*time.Second)
	nctx, ncancel := context.WithCancel(context.Background())
	var nwg sync.WaitGroup
	if len(c.Faults) > 0 {
		n, closeN, err := testNemesis(c, b, st, ws, rec)
		if err != nil {
			t.Errorf("verify: %v", err)
		} else {
			nwg.Go(func() {
				defer closeN()
				if err := n.run(nctx); err != nil {
					t.Error(err)
				}
			})
		}
	}
	if c.Spec.Resize {
		nwg.Go(func() { resizer(nctx, t, c, b, st, rec) })
	}
	// A store's own faults' watch outlives the nemesis: a failover it began
	// may end after the workload's time.
	wctx, wcancel := context.WithCancel(context.Background())
	var wwg sync.WaitGroup
	if b.watch != nil {
		wwg.Go(func() { b.watch(wctx, st, rec) })
	}
	// What a fault leaves on the store (beyond its TTL) is gone this long
	// after it healed: the leftover check's grace, and the recovery
	// checker's allowance.
	grace := time.Second
	if b.grace != nil {
		grace = b.grace(spec)
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
	// locks is left on the store but what outlives them by design (the
	// fence counters).
	time.Sleep(c.Spec.TTL + c.Spec.LockDelay)
	for deadline := time.Now().Add(grace); ; {
		res.Leftover = b.leftover(t, st)
		if len(res.Leftover) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // polling the store's expiry
	}
	h, err := ReadHistory(dir)
	if err != nil {
		t.Fatal(err)
	}
	res.History = h
	unsafe := unsafeFaults
	if b.exact {
		unsafe = nil
	}
	// No store leaves a force that came before what tells its holder to the
	// renewal (Params.LateWatch): Redis's Client checks its holdings when its
	// loss subscription is established, etcd's Driver when its loss watch
	// begins (at the watch's first revision), PostgreSQL's Driver when its
	// LISTEN starts (and each of them a holding registered after a force it
	// heard), ZooKeeper's Driver sets the watch on the holder's node when the
	// queue's child watch fired before the holding was registered, and
	// memlock tells the holder itself.
	slices.Sort(res.Leftover)
	a := Analyze(h, Params{Kind: spec.Kind, N: spec.N, TTL: spec.TTL, Bound: c.Bound, Recovery: grace, Unsafe: unsafe, TokensBack: b.tokensBack, ForceSpans: b.forceSpans, Delay: spec.LockDelay, Told: c.Told,
		HTML: filepath.Join(dir, "resource.html"), Leftover: res.Leftover, ResultTTL: spec.ResultTTL, ResultMax: resultMax(spec), Aim: c.Aim, Detached: detachedLife(spec)})
	res.Stats = a.Stats
	res.Violations = a.Check()
	res.an = a
	if *pagesFlag != "" {
		if _, err := a.Timelines(filepath.Join(*pagesFlag, fmt.Sprintf("%s-seed%d", fileSafe(t.Name()), c.Seed)), res.Violations); err != nil {
			t.Error(err)
		}
	}
	res.Elapsed = time.Since(start)
	return res
}

// resultMax is how long a result of s's Once workload lives at most: its
// TTL, but on etcd, which keeps it on a lease of whole seconds that the
// server may lengthen (0: not judged).
func resultMax(s Spec) time.Duration {
	if s.Backend == "etcd" {
		return 0
	}
	return s.ResultTTL
}

// detachedLife is Params.Detached for s: on etcd a detached holding's entry
// stays on its old Driver's shared lease (docs/handoff.md), which that
// Driver may renew up to the holding's deadline (its TTL, and handOffSlack
// for a renewal on its way at the Detach), for the TTL plus a third, at
// least a second; etcd finds an expired lease within half a second. 0 (the
// TTL and handOffSlack) elsewhere.
func detachedLife(s Spec) time.Duration {
	if s.Backend != "etcd" {
		return 0
	}
	secs := int64((s.TTL + time.Second - 1) / time.Second)
	lease := time.Duration(secs+(secs+2)/3) * time.Second
	return s.TTL + time.Duration(handOffSlack(s.TTL)) + lease + 500*time.Millisecond
}

// testNemesis returns the nemesis of c on st: the store's faults go to b, a
// FaultForce through b's Inspector (closed by the function returned).
func testNemesis(c Config, b *backend, st *store, ws *procs, rec *Recorder) (*nemesis, func(), error) {
	force, closeForce := driver.Inspector(nil), func() {}
	if slices.Contains(c.Faults, FaultForce) {
		if b.inspector == nil {
			return nil, nil, fmt.Errorf("%w: verify: no force-unlock on %s", dlock.ErrInvalid, b.name)
		}
		var err error
		if force, closeForce, err = b.inspector(c, st); err != nil {
			return nil, nil, fmt.Errorf("the force-unlocking inspector: %w", err)
		}
	}
	pace := c.Spec.TTL
	if c.Pace > 0 {
		pace = c.Pace
	}
	n := &nemesis{seed: c.Seed, ttl: pace, workers: c.Workers, faults: c.Faults, procs: ws,
		proxies: st.proxies, nodes: st.nodes, rec: rec,
		store: func(ctx context.Context, f string, d draws) (bool, error) {
			if f == FaultForce {
				// Drawn here, so that the other faults' draws stay those
				// of a repertoire without it.
				return force != nil && forceHeld(ctx, force, c.Spec.Keys, d.Rng.IntN(len(c.Spec.Keys)), rec), nil
			}
			if b.fault == nil || !slices.Contains(b.faults, f) {
				return false, nil
			}
			return b.fault(ctx, c, st, f, d, rec)
		}}
	return n, closeForce, nil
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
	if r.an == nil {
		return
	}
	pages, err := r.an.Timelines(strings.TrimSuffix(path, ".jsonl")+"-timelines", r.Violations)
	if err != nil {
		t.Error(err)
		return
	}
	for _, k := range violatedKeys(r.History, r.Violations, pages) {
		t.Errorf("timeline of %s: file://%s", k, pages[k])
	}
}

// violatedKeys are the keys of pages whose events a violation names, sorted;
// all of them when a violation names no key's event.
func violatedKeys(h []Event, vs []Violation, pages map[string]string) []string {
	keys := map[string]bool{}
	for _, v := range vs {
		named := false
		for _, l := range v.Lines {
			if l >= 0 && l < len(h) && h[l].Key != "" && pages[h[l].Key] != "" {
				keys[h[l].Key], named = true, true
			}
		}
		if !named {
			for k := range pages {
				keys[k] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(keys))
}

// workerProcs runs a worker process's goroutines on one thread at a time:
// every timer it arms (its leases' deadlines, its renewals, its stall watch)
// is on that one scheduler's heap, so a stall that makes its deadline timer
// late makes its stall watch's ticks late too, and is recorded. With more,
// the OS could leave one thread unscheduled, and the timers on its heap
// late, while another ran the watch on time.
const workerProcs = "GOMAXPROCS=1"

// workerEnv is the environment variable that makes a test binary a worker: it
// holds the worker's Spec as JSON (see maybeWorker).
const workerEnv = "DLOCK_VERIFY_WORKER"

// keepWorker keeps worker i of spec running, starting it again when it exits
// (a holder that exited without releasing, or one killed), until ctx ends: a
// process of the test binary bin (maybeWorker), or, where the backend's
// workers share an in-process store, a goroutine.
func keepWorker(ctx context.Context, t testing.TB, ws *procs, bin string, spec Spec, i int) {
	if spec.shared != nil {
		s := spec
		s.Proc = i
		if err := runTestWorker(ctx, s); err != nil {
			t.Error(err)
		}
		return
	}
	logs, err := os.OpenFile(filepath.Join(spec.Dir, fmt.Sprintf("w%02d.log", i)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Error(err)
		return
	}
	defer logs.Close()
	err = ws.keep(ctx, spec, i, func(s Spec) *exec.Cmd {
		b, _ := json.Marshal(s)
		cmd := exec.Command(bin, "-test.run=^$")
		cmd.Env = append(os.Environ(), workerEnv+"="+string(b), workerProcs)
		cmd.Stdout, cmd.Stderr = logs, logs
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		return cmd
	})
	if err != nil {
		t.Error(err)
	}
}

// maybeWorker runs the worker described by $DLOCK_VERIFY_WORKER and exits when
// the variable is set; it returns at once otherwise. TestMain calls it first.
func maybeWorker() {
	v := os.Getenv(workerEnv)
	if v == "" {
		return
	}
	var s Spec
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		fmt.Fprintln(os.Stderr, "verify worker:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := runTestWorker(ctx, s); err != nil {
		fmt.Fprintln(os.Stderr, "verify worker:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// stallWatchEnv makes a test binary run a worker's stall watch alone, as
// worker 3, recording to the file it names, until SIGTERM (see
// TestWorkersRecordTheirStalls); it prints a line once the watch runs.
const stallWatchEnv = "DLOCK_VERIFY_STALLWATCH"

// maybeStallWatch runs the stall watch of stallWatchEnv and exits, if set.
func maybeStallWatch() {
	path := os.Getenv(stallWatchEnv)
	if path == "" {
		return
	}
	rec, err := NewRecorder(path, 3)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	since := Now() // a stop from here on is a stall
	fmt.Println("watching")
	watchStallsSince(ctx, rec, 3, since)
	rec.Close()
	os.Exit(0)
}

// runTestWorker runs the worker loop of s with the Locker its backend (or its
// variant) makes, until ctx ends.
func runTestWorker(ctx context.Context, s Spec) error {
	lk, closeLock, brk, err := newLocker(s)
	if err != nil {
		return err
	}
	defer closeLock()
	return runWorker(ctx, s, lk, brk)
}

// newLocker returns the Locker a worker of s uses (its backend's, or its
// broken variant's), the function that closes its connections, and what the
// variant breaks on the worker's side.
func newLocker(s Spec) (dlock.Locker, func(), Breakage, error) {
	b, err := backendOf(s.Backend)
	if err != nil {
		return nil, func() {}, Breakage{}, err
	}
	if s.Variant == "" {
		lk, closeFn, err := b.locker(s)
		return lk, closeFn, Breakage{}, err
	}
	v, err := variantFor(s)
	if err != nil {
		return nil, func() {}, Breakage{}, err
	}
	if v.lock != nil {
		lk, closeFn, err := v.lock(s)
		return lk, closeFn, v.worker, err
	}
	lk, closeFn, err := b.locker(s)
	return lk, closeFn, v.worker, err
}

var (
	binariesMu sync.Mutex
	binaries   = map[string]string{} // build tags -> the test binary built with them
	binDir     string                // where they are (removed by TestMain)
)

// workerBinary returns the test binary that runs the workers of spec: this
// one, or, for a variant that breaks the library where it compiles only under
// build tags, this package's tests built with them (once per test process).
func workerBinary(spec Spec) (string, error) {
	if spec.Variant == "" {
		return os.Args[0], nil
	}
	v, err := variantFor(spec)
	if err != nil || v.tags == "" {
		return os.Args[0], err
	}
	binariesMu.Lock()
	defer binariesMu.Unlock()
	if bin := binaries[v.tags]; bin != "" {
		return bin, nil
	}
	if binDir == "" {
		if binDir, err = os.MkdirTemp("", "dlock-verify-bin-"); err != nil {
			return "", err
		}
	}
	bin := filepath.Join(binDir, "verify-"+strings.ReplaceAll(v.tags, ",", "-")+".test")
	if out, err := exec.Command("go", "test", "-c", "-tags", v.tags, "-o", bin, ".").CombinedOutput(); err != nil {
		return "", fmt.Errorf("verify: building the workers of variant %s with tags %s: %v\n%s", v.name, v.tags, err, out)
	}
	binaries[v.tags] = bin
	return bin, nil
}

// prebuilds are the builds prebuild started.
var prebuilds sync.WaitGroup

// prebuild starts, in the background, the builds of the worker binaries of
// the variants with build tags that this test process will run (by -run), so
// that the other tests run while they compile: the build takes a minute or
// two, the variant's own run a few seconds. TestMain waits for them.
func prebuild() {
	if *controlFlag {
		return
	}
	run := ""
	if f := flag.Lookup("test.run"); f != nil {
		run = f.Value.String()
	}
	for _, v := range variants {
		if v.tags == "" {
			continue
		}
		for _, e := range v.exposed {
			if !runMatches(run, "TestBrokenVariantsAreCaught/"+e.name(v.name)) {
				continue
			}
			spec := Spec{Variant: v.name, Backend: v.backends[0]}
			prebuilds.Go(func() { _, _ = workerBinary(spec) }) // an error is the variant's test's to report
			break
		}
	}
}

// runMatches reports whether the test of the given name (Test/sub) would
// run under the -run pattern: each of the pattern's slash-separated parts
// matches the name's part at its place (an unparsable pattern: yes).
func runMatches(pattern, name string) bool {
	if pattern == "" {
		return true
	}
	parts, names := strings.Split(pattern, "/"), strings.Split(name, "/")
	for i, p := range parts {
		if i >= len(names) {
			break
		}
		re, err := regexp.Compile(p)
		if err != nil {
			return true
		}
		if !re.MatchString(names[i]) {
			return false
		}
	}
	return true
}

// removeBinaries removes the test binaries workerBinary built.
func removeBinaries() {
	binariesMu.Lock()
	defer binariesMu.Unlock()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
}

// workersStarted waits, within d at most, until each of n workers has opened
// its first history file in dir (it records its start there next).
func workersStarted(dir string, n int, d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) { // polling the workers' files
		started := 0
		for i := range n {
			if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("w%02d-0.jsonl", i))); err == nil {
				started++
			}
		}
		if started == n {
			return
		}
	}
}
