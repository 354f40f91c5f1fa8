package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/redis/go-redis/v9"
)

// metrics are the named figures of one measurement.
type metrics map[string]float64

// measurement is one run of one variant, or the median of its repetitions.
type measurement struct {
	Scenario string  // a, b, c1, c2, p
	Kind     string  // run or median
	Variant  string  // variant name
	N        int     // goroutines (a, b, p), waiters (c1) or keys (c2)
	Rep      int     // repetition, 1-based (runs only)
	M        metrics // the figures
}

// MarshalJSON writes the measurement as one flat object, identifying fields
// first and figures in name order; NaN figures become null.
func (m measurement) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"kind":%q,"scenario":%q,"variant":%q,"n":%d`, m.Kind, m.Scenario, m.Variant, m.N)
	if m.Rep > 0 {
		fmt.Fprintf(&b, `,"rep":%d`, m.Rep)
	}
	names := make([]string, 0, len(m.M))
	for k := range m.M {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		v, err := json.Marshal(m.M[k])
		if math.IsNaN(m.M[k]) || math.IsInf(m.M[k], 0) {
			v, err = []byte("null"), nil
		}
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, `,%q:%s`, k, v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// env is the state shared by every run of one bench invocation.
type env struct {
	cfg   config
	addr  string
	admin *redis.Client
	cons  *consensus // the etcd and ZooKeeper servers, when a variant needs them
	seq   atomic.Int64
	jw    io.Writer
	logw  io.Writer
}

// newClient returns a go-redis client with the options every variant gets (the
// go-redis defaults; name only labels its connections in CLIENT LIST), and the
// hook counting its commands.
func (e *env) newClient(name string) (*redis.Client, *cmdCounter) {
	rdb := redis.NewClient(&redis.Options{Addr: e.addr, ClientName: name})
	c := &cmdCounter{}
	rdb.AddHook(c)
	return rdb, c
}

// prefix returns a key prefix unique to one run.
func (e *env) prefix(scenario string) string {
	return fmt.Sprintf("bench:%s:%d:", scenario, e.seq.Add(1))
}

func (e *env) emit(m measurement) {
	b, err := json.Marshal(m)
	if err != nil {
		fmt.Fprintln(e.logw, "bench: json:", err)
		return
	}
	fmt.Fprintf(e.jw, "%s\n", b)
}

func (e *env) logf(format string, args ...any) {
	fmt.Fprintf(e.logw, time.Now().Format("15:04:05 ")+format+"\n", args...)
}

// run starts a redis-server, runs the selected scenarios and stops the server. It
// returns every measurement (runs and medians).
func run(ctx context.Context, cfg config, out, jw, logw io.Writer) ([]measurement, error) {
	dir, err := os.MkdirTemp("", "dlock-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	// The module path nests under dlock's, so its internal packages are ours too.
	srv, err := testserver.NewRedis(dir)
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	cons, err := startConsensus(cfg, dir)
	defer cons.stop()
	if err != nil {
		return nil, err
	}
	// Scenario bp's worker processes write their standard error here too.
	logw = &syncWriter{w: logw}
	e := &env{cfg: cfg, addr: srv.Addr, cons: cons, jw: jw, logw: logw}
	e.admin = redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer e.admin.Close()
	if err := e.header(ctx, out); err != nil {
		return nil, err
	}
	if err := e.warmUp(ctx); err != nil {
		return nil, err
	}
	var all []measurement
	if cfg.scenarios["a"] {
		for _, g := range cfg.aG {
			ms, err := e.repeat(ctx, "a", g, inA, e.runUncontended)
			all = append(all, ms...)
			if err != nil {
				return all, err
			}
			tableUncontended(out, g, ms)
		}
	}
	if cfg.scenarios["b"] {
		var meds []measurement
		for _, g := range cfg.bG {
			ms, err := e.repeat(ctx, "b", g, inB, e.runSharedClient)
			all = append(all, ms...)
			if err != nil {
				return all, err
			}
			tableSharedClient(out, g, ms)
			meds = append(meds, medians(ms)...)
		}
		headlineContended(out, meds)
	}
	for _, sc := range []struct {
		name, title string
		gs          []int
		bits        int
		f           runner
	}{
		{"bc", "bc. one key, G Clients (one per goroutine)", cfg.bG, inB | inBC, e.runClientEach},
		{"bp", "bp. one key, G processes", cfg.bpG, inB, e.runProcesses},
	} {
		if !cfg.scenarios[sc.name] {
			continue
		}
		for _, g := range sc.gs {
			ms, err := e.repeat(ctx, sc.name, g, sc.bits, sc.f)
			all = append(all, ms...)
			if err != nil {
				return all, err
			}
			tableContended(out, fmt.Sprintf("%s, G = %d, GET+SET increment inside the lock (medians)", sc.title, g), ms)
		}
	}
	if cfg.scenarios["c"] {
		for _, sc := range []struct {
			name string
			n    int
			f    runner
		}{{"c1", cfg.cWaiters, e.runQueue}, {"c2", cfg.cKeys, e.runManyKeys}} {
			ms, err := e.repeat(ctx, sc.name, sc.n, inC, sc.f)
			all = append(all, ms...)
			if err != nil {
				return all, err
			}
			tableWaiters(out, sc.name, sc.n, ms)
		}
	}
	if cfg.scenarios["r"] {
		if err := e.runRedlock(ctx, dir, out); err != nil {
			return all, err
		}
	}
	if cfg.scenarios["s"] {
		ms, err := e.runScale(ctx, out)
		all = append(all, ms...)
		if err != nil {
			return all, err
		}
	}
	if cfg.scenarios["p"] {
		for _, g := range cfg.pG {
			ms, err := e.repeat(ctx, "p", g, inP, e.runPrimitives)
			all = append(all, ms...)
			if err != nil {
				return all, err
			}
			tablePrimitives(out, g, ms)
		}
	}
	tableConsensus(out, all)
	tableRecipes(out, all)
	ts := checkTargets(all)
	tableTargets(out, ts)
	for _, t := range ts {
		e.emitTarget(t)
	}
	return all, nil
}

func (e *env) emitTarget(t target) {
	v := any(t.value)
	if math.IsNaN(t.value) {
		v = nil
	}
	b, err := json.Marshal(map[string]any{"kind": "target", "target": t.name, "value": v, "want": t.bound, "met": t.met})
	if err != nil {
		fmt.Fprintln(e.logw, "bench: json:", err)
		return
	}
	fmt.Fprintf(e.jw, "%s\n", b)
}

// runner measures one variant once with parameter n.
type runner func(ctx context.Context, v variant, n int) (metrics, error)

// repeat runs every selected variant of a scenario cfg.reps times, interleaved
// (each repetition runs every variant once, in an order rotated per repetition),
// emits one JSON line per run and per median, and returns runs and medians.
func (e *env) repeat(ctx context.Context, scenario string, n, bit int, f runner) ([]measurement, error) {
	var vs []variant
	for _, v := range variants {
		if v.in&bit != 0 && (len(e.cfg.only) == 0 || e.cfg.only[v.name]) {
			vs = append(vs, v)
		}
	}
	var out []measurement
	for rep := 1; rep <= e.cfg.reps; rep++ {
		for i := range vs {
			v := vs[(i+rep-1)%len(vs)]
			if err := ctx.Err(); err != nil {
				return out, err
			}
			if err := e.admin.FlushAll(ctx).Err(); err != nil {
				return out, err
			}
			m, err := f(ctx, v, n)
			if err != nil {
				if ctx.Err() != nil {
					return out, ctx.Err()
				}
				e.logf("%s n=%d %s rep %d: error: %v", scenario, n, v.name, rep, err)
				continue
			}
			r := measurement{Scenario: scenario, Kind: "run", Variant: v.name, N: n, Rep: rep, M: m}
			e.emit(r)
			e.logf("%s n=%d %-12s rep %d: %s", scenario, n, v.name, rep, brief(scenario, m))
			out = append(out, r)
		}
	}
	meds := medians(out)
	if scenario == "a" {
		addRatios(out, meds)
	}
	for _, m := range meds {
		e.emit(m)
	}
	return append(out, meds...), nil
}

// brief is the progress line of one run.
func brief(scenario string, m metrics) string {
	switch scenario {
	case "a":
		return fmt.Sprintf("%.0f cycles/s p50 %.0fµs", m["cycles_per_s"], m["lat_p50_us"])
	case "p":
		return fmt.Sprintf("%.0f ops/s jain %.2f (excl %.2f) excl wait max %.0fms timeouts %.0f most shared %.0f overlaps %.0f lost %.0f %.2f cmds/op",
			m["ops_per_s"], m["jain"], m["jain_excl"], m["excl_wait_max_ms"], m["timeouts"], m["most_shared"], m["overlaps"], m["lost"], m["cmds_per_op_client"])
	case "b", "bc", "bp":
		return fmt.Sprintf("%.0f cs/s %.0f handoffs/s timeouts %.0f jain %.2f lost %.0f overlaps %.0f",
			m["cs_per_s"], m["handoffs_per_s"], m["timeouts"], m["jain"], m["lost"], m["overlaps"])
	}
	return fmt.Sprintf("waiters %.0f handoffs %.0f in %.2fs, %.1f cmds/handoff, sub conns %.0f, %.0f B/waiter",
		m["waiters"], m["handoffs"], m["drain_s"], m["cmds_per_handoff_client"], m["sub_conns"], m["bytes_per_waiter"])
}

// medians returns, for every variant among the runs in ms, the median of each
// figure over its repetitions.
func medians(ms []measurement) []measurement {
	type k struct {
		scenario, variant string
		n                 int
	}
	groups := map[k][]measurement{}
	var order []k
	for _, m := range ms {
		if m.Kind != "run" {
			continue
		}
		key := k{m.Scenario, m.Variant, m.N}
		if _, ok := groups[key]; !ok {
			order = append(order, key)
		}
		groups[key] = append(groups[key], m)
	}
	var out []measurement
	for _, key := range order {
		runs := groups[key]
		med := metrics{"reps": float64(len(runs))}
		names := map[string]bool{}
		for _, r := range runs {
			for name := range r.M {
				names[name] = true
			}
		}
		for name := range names {
			var xs []float64
			for _, r := range runs {
				if x, ok := r.M[name]; ok && !math.IsNaN(x) {
					xs = append(xs, x)
				}
			}
			med[name] = median(xs)
		}
		out = append(out, measurement{Scenario: key.scenario, Kind: "median", Variant: key.variant, N: key.n, M: med})
	}
	sort.SliceStable(out, func(i, j int) bool { return variantIndex(out[i].Variant) < variantIndex(out[j].Variant) })
	return out
}

// addRatios adds to the medians of scenario a the median over repetitions of each
// run's ratio to the raw baseline of the same repetition.
func addRatios(runs, meds []measurement) {
	raw := map[int]metrics{}
	for _, r := range runs {
		if r.Kind == "run" && r.Variant == "raw" {
			raw[r.Rep] = r.M
		}
	}
	for i := range meds {
		for _, f := range []string{"cycles_per_s", "lat_p50_us", "lat_p99_us"} {
			var xs []float64
			for _, r := range runs {
				if b, ok := raw[r.Rep]; ok && r.Kind == "run" && r.Variant == meds[i].Variant {
					xs = append(xs, ratio(r.M[f], b[f]))
				}
			}
			meds[i].M[f+"_vs_raw"] = median(xs)
		}
	}
}

func variantIndex(name string) int {
	for i, v := range variants {
		if v.name == name {
			return i
		}
	}
	return len(variants)
}

// header prints the machine, the server, the client options and the variants,
// and emits them as one JSON line.
func (e *env) header(ctx context.Context, out io.Writer) error {
	info, err := e.admin.Info(ctx, "server").Result()
	if err != nil {
		return err
	}
	version := infoField(info, "redis_version")
	opts := redis.Options{Addr: e.addr}
	probe := redis.NewClient(&opts)
	poolSize := probe.Options().PoolSize
	probe.Close()
	host, _ := os.Hostname()
	fmt.Fprintf(out, "## Run\n\n")
	fmt.Fprintf(out, "- machine: %s, %d CPUs (GOMAXPROCS %d), %s/%s, %s; load average %s\n",
		cpuModel(), runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH, host, loadAvg())
	fmt.Fprintf(out, "- go: %s; redis-server %s on %s (no persistence)\n", runtime.Version(), version, e.addr)
	etcdVersion, zkVersion := e.cons.versions(ctx)
	if e.cons.etcd != nil {
		fmt.Fprintf(out, "- etcd %s on %s: one member, its WAL on the local disk (fsync per write)\n", etcdVersion, e.cons.etcd.Addr)
	}
	if e.cons.zk != nil {
		fmt.Fprintf(out, "- ZooKeeper %s on %s: standalone, tick %v, its transaction log on the local disk (fsync per write)\n", zkVersion, e.cons.zk.Addr, testserver.ZooKeeperTick)
	}
	if e.cons.pg != nil {
		fmt.Fprintf(out, "- PostgreSQL %s on %s: fsync off (as the Redis here has no persistence; etcd and ZooKeeper do fsync)\n", pgVersion(ctx, e.cons.pg.URL), e.cons.pg.Addr)
	}
	if e.cons.nats != nil {
		sync := "sync_interval always (fsync per write)"
		if os.Getenv(natsSyncEnv) == "default" {
			sync = "the default sync_interval (2 min; " + natsSyncEnv + "=default)"
		}
		fmt.Fprintf(out, "- NATS server (embedded, its own process) on %s: JetStream file store, %s\n", e.cons.nats.URL, sync)
	}
	if e.cons.my != nil {
		fmt.Fprintf(out, "- MariaDB %s on %s: InnoDB, the log written at each commit and flushed once a second (innodb_flush_log_at_trx_commit=2)\n", myVersion(ctx, e.cons.my.DSN), e.cons.my.Addr)
	}
	fmt.Fprintf(out, "- client: a fresh go-redis v9 client per run with default options (pool size %d)\n", poolSize)
	fmt.Fprintf(out, "- settings: reps %d, a %v per run, b %v per run with waits bounded at %v, c %d waiters / %d keys (polling lockers capped at %d), settle window %v, hand-over phase at most %v\n",
		e.cfg.reps, e.cfg.aDur, e.cfg.bDur, e.cfg.wait, e.cfg.cWaiters, e.cfg.cKeys, e.cfg.cPollCap, e.cfg.cSettle, e.cfg.cDrain)
	fmt.Fprintf(out, "\nVariants:\n\n")
	for _, v := range variants {
		fmt.Fprintf(out, "- `%s`: %s\n", v.name, v.desc)
	}
	fmt.Fprint(out, readingNotes)
	b, _ := json.Marshal(map[string]any{
		"kind": "env", "cpu": cpuModel(), "cpus": runtime.NumCPU(), "gomaxprocs": runtime.GOMAXPROCS(0), "go": runtime.Version(),
		"redis": version, "etcd": etcdVersion, "zookeeper": zkVersion, "pool_size": poolSize, "reps": e.cfg.reps, "quick": e.cfg.quick,
		"a_dur_s": e.cfg.aDur.Seconds(), "b_dur_s": e.cfg.bDur.Seconds(), "wait_s": e.cfg.wait.Seconds(),
	})
	fmt.Fprintf(e.jw, "%s\n", b)
	return nil
}

func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return "?"
}

// cpuModel returns the first model name in /proc/cpuinfo, or "?".
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// readingNotes explains the columns of the tables.
const readingNotes = `
How to read the tables:

- cmds client: commands the measured go-redis client sent through its command
  hooks (pub/sub traffic does not pass there), excluding the critical section's
  own GET and SET. cmds server: the server's INFO commandstats delta, which also
  counts every command a Lua script runs, minus the critical section's GET and
  SET and the bench's own bookkeeping (INFO, CLIENT, PUBSUB, HELLO, ...).
  The etcd and zk variants lock on their own server (the critical section's
  GET and SET still go to Redis): their cmds client are the gRPC messages the
  etcd clients sent (watch and keep-alive stream messages included) or the
  packets the ZooKeeper sessions wrote (pings included); cmds server are the
  gRPC messages etcd received (its grpc_server_msg_received_total) or the
  packets ZooKeeper received (srvr), whoever sent them, and server CPU is the
  etcd or ZooKeeper process's (/proc/PID/stat, 10ms ticks). fsyncs/op and
  fsync ms: etcd's WAL fsyncs per operation and their mean time (its
  etcd_disk_wal_fsync_duration_seconds). Both servers lock and unlock for a
  second before the first measurement (their first requests are many times
  slower), and their CPU use while idle is measured then (an "idle" JSON line).
- a: CPU µs/cycle is the CPU time (user and system) per lock cycle of the bench
  process (client, whose only work then is the measured lock) and of the
  redis-server process (INFO cpu).
- b: a handoff is a critical section run by a different goroutine than the one
  before it; handoff % is handoffs per critical section. Waits are from calling
  lock to holding it; an acquire not done within -wait counts as timed out (waits
  cut short by the end of a run count as nothing). Jain is Jain's fairness index
  over the goroutines' critical-section counts (1 = equal shares, 1/G = one
  goroutine got everything). max/(G·CS) is the longest wait over G times the
  median critical section. lost = acknowledged increments missing from the
  counter; overlaps = critical sections entered while another was running.
- c: the holders lock through a go-redis client of their own: client-side
  counts, conns and memory are the waiters' client's; server-side counts include
  the holders' releases. Waiters start once the lock is held. When all have
  called lock and are steady (five 100ms samples with the same number of
  subscribed channels and command counts within 10% of their mean), idle
  cmds/s (commands while nobody releases) is measured over the settle window;
  then conns (CLIENT LIST), sub conns (connections in pub/sub mode), channels
  (channels, shard channels and patterns subscribed, INFO stats) and
  bytes/waiter (Go heap and stack growth after GC, per waiter, its goroutine
  included) are taken. Then the holder releases (c2: every holder) and the
  hand-over phase runs until every waiter has held and released the lock, or
  for at most -c-drain. Polling lockers get at most -c-poll-cap waiters:
  thousands of pollers measure the server's overload, not the lock.

`

// syncWriter serializes the writes of several goroutines to w.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}
