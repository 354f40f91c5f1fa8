package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/etcdlock"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/zklock"
	"google.golang.org/grpc/stats"
)

// The servers a variant can lock on.
const (
	onRedis = ""
	onEtcd  = "etcd"
	onZK    = "zk"
)

// connectTimeout bounds the connection of one etcd client or ZooKeeper session.
const connectTimeout = 10 * time.Second

// consensus is the etcd and ZooKeeper servers of a run: each started only when a
// selected variant locks on it.
type consensus struct {
	etcd *testserver.Etcd
	zk   *testserver.ZooKeeper
	pg   *testserver.Postgres
	nats *natsProc
	my   *testserver.MariaDB
}

// startConsensus starts, under dir, the servers that the variants cfg runs lock
// on.
func startConsensus(cfg config, dir string) (*consensus, error) {
	c := &consensus{}
	var err error
	if cfg.needs(onEtcd) {
		if c.etcd, err = testserver.NewEtcd(dir); err != nil {
			return c, err
		}
	}
	if cfg.needs(onZK) {
		if c.zk, err = testserver.NewZooKeeper(dir); err != nil {
			return c, err
		}
	}
	if cfg.needs(onPG) {
		if c.pg, err = testserver.NewPostgres(dir); err != nil {
			return c, err
		}
	}
	if cfg.needs(onNATS) {
		if c.nats, err = startNATS(dir); err != nil {
			return c, err
		}
	}
	if cfg.needs(onMySQL) {
		sub := dir + "/mariadb"
		if err = os.Mkdir(sub, 0o755); err != nil {
			return c, err
		}
		if c.my, err = testserver.NewMariaDB(sub); err != nil {
			return c, err
		}
	}
	return c, nil
}

func (c *consensus) stop() {
	if c.etcd != nil {
		c.etcd.Stop()
	}
	if c.zk != nil {
		c.zk.Stop()
	}
	if c.pg != nil {
		c.pg.Remove()
	}
	if c.nats != nil {
		c.nats.stop()
	}
	if c.my != nil {
		c.my.Stop()
	}
}

// needs reports whether a variant the run measures locks on the server named on.
func (c config) needs(on string) bool {
	for _, v := range variants {
		if v.on == on && c.runs(v) {
			return true
		}
	}
	return false
}

// runs reports whether the run measures variant v in some scenario.
func (c config) runs(v variant) bool {
	if len(c.only) > 0 && !c.only[v.name] {
		return false
	}
	for s, bits := range map[string]int{"a": inA, "b": inB, "bc": inB | inBC, "bp": inB, "c": inC} {
		if c.scenarios[s] && v.in&bits != 0 {
			return true
		}
	}
	return false
}

// openEtcd opens an etcdlock Client on an etcd client of its own, whose requests
// (gRPC messages sent, stream messages included) count as lock commands.
func openEtcd(o opening) (locker, error) {
	cli, err := countedEtcdClient(o)
	if err != nil {
		return nil, err
	}
	d, err := etcdlock.NewDriver(cli)
	if err != nil {
		cli.Close()
		return nil, err
	}
	c, err := etcdlock.NewClient(d)
	if err != nil {
		cli.Close()
		return nil, err
	}
	return dlockLocker{c: c, close: func() error { return errors.Join(d.Close(), cli.Close()) }}, nil
}

// openZK opens a zklock Client on a Driver (a ZooKeeper session) of its own,
// whose requests (packets written, pings included) count as lock commands.
func openZK(o opening) (locker, error) {
	if o.e == nil || o.e.cons.zk == nil {
		return nil, errors.New("bench: no ZooKeeper server in this run")
	}
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	d, err := zklock.NewDriver(ctx, []string{o.e.cons.zk.Addr}, zklock.WithDialer(countingDialer(o.cnt)))
	if err != nil {
		return nil, err
	}
	c, err := zklock.NewClient(d)
	if err != nil {
		d.Close()
		return nil, err
	}
	return dlockLocker{c: c, close: d.Close}, nil
}

// warmUp locks and unlocks, for the config's warm-up time (a second, 300 ms
// with -quick), through every variant of the run that does not lock on Redis:
// the first requests a fresh server serves (ZooKeeper's JVM above all) are
// many times slower than the later ones.
func (e *env) warmUp(ctx context.Context) error {
	for _, v := range variants {
		if v.on == onRedis || !e.cfg.runs(v) {
			continue
		}
		ms, err := e.openMeasured(v, "bench-warmup")
		if err != nil {
			return fmt.Errorf("warm-up of %s: %w", v.name, err)
		}
		m := ms.lk.mutex("bench:warmup")
		n := 0
		for end := time.Now().Add(e.cfg.warmUp); time.Now().Before(end) && err == nil; n++ {
			if err = m.lock(ctx); err == nil {
				err = m.unlock(ctx)
			}
		}
		ms.close()
		if err != nil {
			return fmt.Errorf("warm-up of %s: %w", v.name, err)
		}
		e.logf("warm-up %-12s %d lock cycles in %v", v.name, n, e.cfg.warmUp)
	}
	return e.idleCPU(ctx)
}

// idleWindow is how long idleCPU watches each server.
const idleWindow = time.Second

// idleCPU measures, and emits as a JSON line, the CPU time etcd and ZooKeeper
// use while nobody locks: part of every run's server CPU per operation.
func (e *env) idleCPU(ctx context.Context) error {
	for _, on := range []string{onEtcd, onZK, onPG, onNATS, onMySQL} {
		if !e.cfg.needs(on) {
			continue
		}
		c0, err := e.lockServerCPU(ctx, on)
		if err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(idleWindow):
		}
		c1, err := e.lockServerCPU(ctx, on)
		if err != nil {
			return err
		}
		ms := float64(c1-c0) / float64(time.Millisecond) / idleWindow.Seconds()
		e.logf("%s idle: %.0f ms of CPU per second", on, ms)
		b, _ := json.Marshal(map[string]any{"kind": "idle", "server": on, "cpu_ms_per_s": ms})
		fmt.Fprintf(e.jw, "%s\n", b)
	}
	return nil
}

// closeLocker closes lk if it holds a connection of its own.
func closeLocker(lk locker) {
	if c, ok := lk.(io.Closer); ok {
		_ = c.Close()
	}
}

// grpcCounter is a gRPC stats handler that counts the messages a client sends.
type grpcCounter struct{ c *cmdCounter }

var _ stats.Handler = grpcCounter{}

// TagRPC implements stats.Handler.
func (grpcCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

// HandleRPC implements stats.Handler.
func (g grpcCounter) HandleRPC(_ context.Context, s stats.RPCStats) {
	if p, ok := s.(*stats.OutPayload); ok && p.IsClient() {
		g.c.lock.Add(1)
	}
}

// TagConn implements stats.Handler.
func (grpcCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

// HandleConn implements stats.Handler.
func (g grpcCounter) HandleConn(_ context.Context, s stats.ConnStats) {
	if _, ok := s.(*stats.ConnBegin); ok {
		g.c.dials.Add(1)
	}
}

// countingDialer dials ZooKeeper connections that count every write as a
// request: the ZooKeeper client writes each request (and each ping) at once.
func countingDialer(c *cmdCounter) func(network, address string, timeout time.Duration) (net.Conn, error) {
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		conn, err := net.DialTimeout(network, address, timeout)
		if err != nil {
			return nil, err
		}
		c.dials.Add(1)
		return countingConn{conn, c}, nil
	}
}

type countingConn struct {
	net.Conn
	c *cmdCounter
}

func (c countingConn) Write(b []byte) (int, error) {
	c.c.lock.Add(1)
	return c.Conn.Write(b)
}

// requests returns the requests the lock server named on has received: for
// Redis the commands (see serverCalls), for etcd the gRPC messages, for
// ZooKeeper the packets (pings included), for PostgreSQL the messages (see
// pgWrites).
func (e *env) requests(ctx context.Context, on string) (int64, error) {
	switch on {
	case onEtcd:
		return etcdReceived(ctx, e.cons.etcd.ClientURL)
	case onZK:
		return zkReceived(e.cons.zk)
	case onPG:
		return pgWrites.Load(), nil
	case onNATS:
		return natsRequests(), nil
	case onMySQL:
		return myWrites.Load(), nil
	}
	return serverCalls(ctx, e.admin)
}

// lockServerCPU returns the CPU time the lock server named on has used.
func (e *env) lockServerCPU(ctx context.Context, on string) (time.Duration, error) {
	switch on {
	case onEtcd:
		return pidCPU(e.cons.etcd.PID())
	case onZK:
		return pidCPU(e.cons.zk.PID())
	case onPG:
		return pgCPU(e.cons.pg.PID())
	case onNATS:
		return pidCPU(e.cons.nats.cmd.Process.Pid)
	case onMySQL:
		return pidCPU(e.cons.my.PID())
	}
	return serverCPU(ctx, e.admin)
}

// disk is a reading of the lock server's WAL fsyncs: etcd's only (its
// etcd_disk_wal_fsync_duration_seconds); ok is false for the other servers or
// when the metrics cannot be read.
type disk struct {
	ok           bool
	fsyncs, secs float64
}

func (e *env) readDisk(ctx context.Context, on string) disk {
	if on != onEtcd {
		return disk{}
	}
	b, err := httpGet(ctx, e.cons.etcd.ClientURL+"/metrics")
	if err != nil {
		return disk{}
	}
	var d disk
	for _, line := range strings.Split(string(b), "\n") {
		name, v, _ := strings.Cut(line, " ")
		x, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		switch {
		case err != nil:
		case name == "etcd_disk_wal_fsync_duration_seconds_count":
			d.fsyncs, d.ok = x, true
		case name == "etcd_disk_wal_fsync_duration_seconds_sum":
			d.secs = x
		}
	}
	return d
}

// since returns the fsyncs from d0 to d.
func (d disk) since(d0 disk) disk {
	return disk{ok: d.ok && d0.ok, fsyncs: d.fsyncs - d0.fsyncs, secs: d.secs - d0.secs}
}

// add sets, when d is a reading, the fsyncs per op (wal_fsyncs_per_<per>) and
// their mean time in m.
func (d disk) add(m metrics, ops float64, per string) {
	if !d.ok {
		return
	}
	m["wal_fsyncs_per_"+per] = ratio(d.fsyncs, ops)
	m["wal_fsync_ms"] = 1000 * ratio(d.secs, d.fsyncs)
}

// metricsHTTP keeps no idle connections, so that no transport goroutine outlives
// a call.
var metricsHTTP = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}

func httpGet(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := metricsHTTP.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return b, err
}

// etcdReceived sums the gRPC messages etcd has received, over all methods, from
// its Prometheus metrics.
func etcdReceived(ctx context.Context, clientURL string) (int64, error) {
	b, err := httpGet(ctx, clientURL+"/metrics")
	if err != nil {
		return 0, err
	}
	var total float64
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "grpc_server_msg_received_total{") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("etcd metrics: %q: %w", line, err)
		}
		total += v
	}
	return int64(total), sc.Err()
}

// zkReceived returns the packets the ZooKeeper server has received (its srvr
// word's Received).
func zkReceived(z *testserver.ZooKeeper) (int64, error) {
	s, err := z.FourLetter("srvr")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Received:"); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("ZooKeeper srvr has no Received: %q", s)
}

// clockTick is the unit of the CPU times in /proc/PID/stat (USER_HZ, 100 on
// every Linux architecture Go supports).
const clockTick = 10 * time.Millisecond

// procStat returns the fields of /proc/PID/stat after the command name (in
// parentheses): the state is field 0, the parent's pid field 1, utime and
// stime fields 11 and 12, cutime and cstime fields 13 and 14.
func procStat(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return nil, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return nil, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	return f, nil
}

// ticks sums the clock ticks of the given /proc/PID/stat fields.
func ticks(pid int, fields []string) (time.Duration, error) {
	var n int64
	for _, s := range fields {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		n += v
	}
	return time.Duration(n) * clockTick, nil
}

// pidCPU returns the CPU time (user and system) process pid has used, from
// /proc/PID/stat.
func pidCPU(pid int) (time.Duration, error) {
	f, err := procStat(pid)
	if err != nil {
		return 0, err
	}
	return ticks(pid, f[11:13])
}

// versions returns the etcd and ZooKeeper versions of the run, for the header.
func (c *consensus) versions(ctx context.Context) (etcd, zk string) {
	if c.etcd != nil {
		etcd = "?"
		if b, err := httpGet(ctx, c.etcd.ClientURL+"/version"); err == nil {
			var v struct{ Etcdserver string }
			if json.Unmarshal(b, &v) == nil {
				etcd = v.Etcdserver
			}
		}
	}
	if c.zk != nil {
		zk = "?"
		if s, err := c.zk.FourLetter("srvr"); err == nil {
			first, _, _ := strings.Cut(s, "\n")
			if v, ok := strings.CutPrefix(first, "Zookeeper version: "); ok {
				zk, _, _ = strings.Cut(v, "-")
			}
		}
	}
	return etcd, zk
}

// consensusRefs are the Redis variants the etcd and ZooKeeper figures are
// compared with: the plain lock uncontended, the fair (queued) lock for
// hand-overs, as etcd and ZooKeeper queue their waiters too.
var consensusRefs = map[string]string{"a": "dlock", "bc": "dlock/fair"}

// tableConsensus prints, for scenarios a and bc, every variant locking on etcd or
// ZooKeeper next to the Redis dlock variants: the throughput, its ratio to
// consensusRef (median over repetitions of the ratio within each), requests per
// lock cycle or critical section and the lock server's CPU. It prints nothing
// when no such variant ran.
func tableConsensus(out io.Writer, ms []measurement) {
	type key struct {
		scenario, variant string
		n                 int
	}
	runs := map[key]map[int]metrics{}
	var found bool
	for _, m := range ms {
		if m.Kind != "run" || (m.Scenario != "a" && m.Scenario != "bc") {
			continue
		}
		k := key{m.Scenario, m.Variant, m.N}
		if runs[k] == nil {
			runs[k] = map[int]metrics{}
		}
		runs[k][m.Rep] = m.M
		if i := variantIndex(m.Variant); i < len(variants) && variants[i].on != onRedis {
			found = true
		}
	}
	if !found {
		return
	}
	fmt.Fprintf(out, "### The price of consensus: dlock on Redis, etcd, ZooKeeper and PostgreSQL (medians; × ref = median of per-repetition ratios to the ref variant)\n\n")
	rows := [][]string{
		{"variant", "scenario", "G", "ops/s", "× ref", "p50", "requests/op client", "server", "server CPU µs/op", "fsyncs/op", "fsync ms"},
		{"---", "---", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:"},
	}
	for _, sc := range []struct {
		name, what, ops, cmds, cpu, fsyncs, p50, p50Format string
	}{
		{"a", "a: lock+unlock cycles/s", "cycles_per_s", "cmds_per_cycle", "server_cpu_us_per_cycle", "wal_fsyncs_per_cycle", "lat_p50_us", "%.0f µs"},
		{"bc", "bc: hand-overs/s", "handoffs_per_s", "cmds_per_cs", "server_cpu_us_per_cs", "wal_fsyncs_per_cs", "wait_p50_ms", "%.1f ms"},
	} {
		var ns []int
		for k := range runs {
			if k.scenario == sc.name && !slices.Contains(ns, k.n) {
				ns = append(ns, k.n)
			}
		}
		slices.Sort(ns)
		for _, n := range ns {
			ref := runs[key{sc.name, consensusRefs[sc.name], n}]
			for _, v := range variants {
				rs := runs[key{sc.name, v.name, n}]
				if rs == nil || (v.lib != "dlock" && v.on == onRedis) {
					continue
				}
				var ratios []float64
				col := func(f string) float64 {
					var xs []float64
					for _, m := range rs {
						if x, ok := m[f]; ok && !math.IsNaN(x) {
							xs = append(xs, x)
						}
					}
					return median(xs)
				}
				for rep, m := range rs {
					if r, ok := ref[rep]; ok {
						ratios = append(ratios, ratio(m[sc.ops], r[sc.ops]))
					}
				}
				name := v.name
				if name == consensusRefs[sc.name] {
					name += " (ref)"
				}
				rows = append(rows, []string{name, sc.what, strconv.Itoa(n),
					fmt.Sprintf("%.0f", col(sc.ops)), fmtNaN("%.2f", median(ratios)),
					fmtNaN(sc.p50Format, col(sc.p50)),
					fmtNaN("%.2f", col(sc.cmds+"_client")), fmtNaN("%.2f", col(sc.cmds+"_server")),
					fmtNaN("%.0f", col(sc.cpu)), fmtNaN("%.2f", col(sc.fsyncs)), fmtNaN("%.2f", col("wal_fsync_ms"))})
			}
		}
	}
	writeTable(out, rows)
	fmt.Fprintln(out)
}

func fmtNaN(format string, v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return fmt.Sprintf(format, v)
}
