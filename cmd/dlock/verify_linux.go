package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/dlock-go/dlock/natslock"
	"github.com/dlock-go/dlock/pglock"
	"github.com/dlock-go/dlock/redislock"
	"github.com/dlock-go/dlock/verify"
	"github.com/redis/go-redis/v9"
)

// verifyWorkerEnv carries a worker's orders (verifyWorker as JSON) from dlock
// verify to the process it starts: the server URLs stay out of the process
// list.
const verifyWorkerEnv = "DLOCK_VERIFY_OPERATOR"

// verifyWorker is what a worker process of dlock verify needs.
type verifyWorker struct {
	Spec verify.Spec
	Flag string   // the backend's server flag
	URLs []string // its servers, through the run's proxies where there are
}

func runVerify(ctx context.Context, e *env, args []string) int {
	c := verifyCommand()
	o := new(verifyFlags)
	fs := o.define()
	a, code, ok := parseFlags(e, c, fs, args)
	if !ok {
		return code
	}
	if o.worker {
		return runVerifyWorker(ctx, e)
	}
	if err := o.check(len(a.before) + len(a.after)); err != nil {
		return fail(e, c.name, err)
	}
	faults, _ := o.faultList()
	b, urls, err := o.srv.selected(e)
	if err != nil {
		return fail(e, c.name, err)
	}
	st, err := o.srv.open(ctx, e)
	if err != nil {
		return fail(e, c.name, err)
	}
	defer st.close()
	if held, err := heldUnder(ctx, st, o.prefix); err != nil {
		return fail(e, c.name, err)
	} else if len(held) > 0 {
		return fail(e, c.name, usageErrorf("%d lock(s) under --prefix %s are held on %s (%s first): choose a prefix nothing else uses", len(held), o.prefix, st, held[0].Key))
	}
	// The run's lock names carry a tag drawn for the run, so that no lock
	// another client takes under the prefix is one of them; at the end (also
	// after an interrupt) the entries of these names alone go: whatever else
	// is under the prefix (a lock, a semaphore's size, a value, a latch) is
	// not touched.
	keys := runKeys(o.prefix+runTag()+"-", o.keys)
	if b.flag == "nats" {
		if err := natslock.CheckKey(keys[0]); err != nil {
			return fail(e, c.name, usageErrorf("--prefix %s: the run's lock names (%s...) are NATS keys: letters, digits and -_/=.", o.prefix, keys[0]))
		}
	}
	defer func() {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		n, err := purge(pctx, st, keys)
		if err != nil {
			fmt.Fprintf(e.stderr, "dlock verify: removing the entries of the run's locks %s..: %s\n", keys[0], oneLine(err))
			return
		}
		fmt.Fprintf(e.stdout, "removed %d entries of the run's locks %s..%s\n", n, keys[0], keys[len(keys)-1])
	}()

	resource := miniredis.NewMiniRedis()
	if err := resource.Start(); err != nil {
		return fail(e, c.name, err)
	}
	defer resource.Close()
	wurls, proxies := verifyProxies(b.flag, urls, &o.srv.tls, st)
	for _, p := range proxies {
		defer p.Close()
	}
	dir, err := os.MkdirTemp("", "dlock-verify-")
	if err != nil {
		return fail(e, c.name, err)
	}
	defer os.RemoveAll(dir)
	exe, err := os.Executable()
	if err != nil {
		return fail(e, c.name, err)
	}
	seed := o.seed
	if seed == 0 {
		seed = rand.Uint64N(1 << 48)
	}
	spec := verify.Spec{Backend: b.flag, Kind: "plain", Resource: resource.Addr(), TTL: o.ttl,
		Hold: o.ttl * 3 / 5, Wait: 3 * o.ttl, ExitProb: 0.05, Dir: dir}
	spec.Keys = keys
	logs := make([]*os.File, o.workers) // each worker's stderr, for a look after the run
	for i := range logs {
		if logs[i], err = os.Create(filepath.Join(dir, fmt.Sprintf("w%02d.log", i))); err != nil {
			return fail(e, c.name, err)
		}
		defer logs[i].Close()
	}
	cfg := verify.OperatorConfig{Spec: spec, Workers: o.workers, Duration: o.duration, Seed: seed, Faults: faults, Proxies: proxies,
		Command: func(s verify.Spec) *exec.Cmd {
			orders, _ := json.Marshal(verifyWorker{Spec: s, Flag: b.flag, URLs: wurls})
			cmd := exec.Command(exe, "verify", "--worker")
			// GOMAXPROCS=1: the worker's stall watch sees whatever makes
			// its timers late (see the verification suite's workers).
			cmd.Env = append(os.Environ(), verifyWorkerEnv+"="+string(orders), "GOMAXPROCS=1",
				"DLOCK_TLS_CA="+o.srv.tls.ca, "DLOCK_TLS_CERT="+o.srv.tls.cert, "DLOCK_TLS_KEY="+o.srv.tls.key)
			if log := logs[s.Proc]; log != nil {
				cmd.Stdout, cmd.Stderr = log, log
			}
			// Its own process group, so that a Ctrl-C reaches dlock verify
			// alone, which stops the workers and cleans up; killed if dlock
			// verify dies.
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
			return cmd
		}}
	fmt.Fprintf(e.stdout, "dlock verify on %s: prefix %s, %d keys (%s..), %d workers, TTL %v, %v, faults: %s, seed %d\n",
		st, o.prefix, o.keys, keys[0], o.workers, o.ttl, o.duration, faultNames(faults, proxies), seed)
	if err := verify.Operate(ctx, cfg); err != nil {
		return fail(e, c.name, err)
	}
	if ctx.Err() != nil {
		fmt.Fprintln(e.stderr, "dlock verify: interrupted; no verdict")
		return 130
	}
	left := verifyLeftover(ctx, st, keys, o.ttl)
	h, err := verify.ReadHistory(dir)
	if err != nil {
		return fail(e, c.name, err)
	}
	hist := o.history
	if hist == "" {
		hist = filepath.Join(os.TempDir(), fmt.Sprintf("dlock-verify-%s-%d.jsonl", strings.ReplaceAll(o.prefix, ":", "_"), seed))
	}
	if err := verify.WriteHistory(hist, h); err != nil {
		return fail(e, c.name, err)
	}
	html := strings.TrimSuffix(hist, ".jsonl") + ".html"
	props, an := verify.Properties(h, verify.Params{Kind: "plain", TTL: o.ttl, HTML: html, Leftover: left})
	stats := an.Stats
	fmt.Fprintf(e.stdout, "%d operations, %d grants, %d writes (%d refused), %d faults\n\n", stats.Ops, stats.Grants, stats.Writes, stats.Refused, stats.Faults)
	if stats.Grants == 0 {
		// Nothing was checked: say why rather than pass.
		return fail(e, c.name, unavailableErrorf("no lock was granted during the run; the last error: %s", lastError(h, dir, o.workers)))
	}
	failed := 0
	for _, p := range props {
		if p.Violation == nil {
			fmt.Fprintf(e.stdout, "PASS  %-13s %s\n", p.Name, p.What)
			continue
		}
		failed++
		fmt.Fprintf(e.stdout, "FAIL  %-13s %s\n", p.Name, p.What)
		for _, l := range strings.Split(strings.TrimRight(p.Violation.Format(h), "\n"), "\n") {
			fmt.Fprintf(e.stdout, "      %s\n", l)
		}
	}
	fmt.Fprintf(e.stdout, "\nhistory: %s\n", hist)
	var vs []verify.Violation
	for _, p := range props {
		if p.Violation != nil {
			vs = append(vs, *p.Violation)
		}
	}
	pages := strings.TrimSuffix(hist, ".jsonl") + "-timelines"
	if _, err := an.Timelines(pages, vs); err != nil {
		fmt.Fprintf(e.stderr, "dlock verify: the timelines: %v\n", err)
	} else {
		fmt.Fprintf(e.stdout, "timelines, a page per lock: %s\n", pages)
	}
	if failed > 0 {
		fmt.Fprintf(e.stdout, "%d of %d properties violated (replay the faults with --seed %d)\n", failed, len(props), seed)
		return exitFailure
	}
	fmt.Fprintf(e.stdout, "every property holds (seed %d)\n", seed)
	return exitOK
}

// faultNames says which faults a run injects: the proxy's only with proxies.
func faultNames(faults []string, proxies []*verify.Proxy) string {
	var out []string
	for _, f := range faults {
		if (f == "reset" || f == "delay") && len(proxies) == 0 {
			continue
		}
		out = append(out, f)
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ",")
}

// runVerifyWorker is one worker process of dlock verify: its orders are in
// $DLOCK_VERIFY_OPERATOR; it runs until SIGTERM.
func runVerifyWorker(ctx context.Context, e *env) int {
	var w verifyWorker
	if err := json.Unmarshal([]byte(e.getenv(verifyWorkerEnv)), &w); err != nil {
		return fail(e, "verify", usageErrorf("--worker is dlock verify's own: $%s: %v", verifyWorkerEnv, err))
	}
	urls := stringsFlag(w.URLs)
	srv := servers{urls: map[string]*stringsFlag{w.Flag: &urls}}
	st, err := srv.open(ctx, e)
	if err != nil {
		return fail(e, "verify", err)
	}
	defer st.close()
	lk, err := st.locker(plainLock, 1)
	if err != nil {
		return fail(e, "verify", err)
	}
	if err := verify.RunWorkerLocker(ctx, w.Spec, lk); err != nil {
		return fail(e, "verify", err)
	}
	return exitOK
}

// verifyProxies starts a Proxy for each server the workers can reach
// through one (plain TCP to a single address: not TLS, a Unix socket, Redis
// Cluster, whose nodes redirect to their own addresses, or a PostgreSQL
// key=value string) and returns the URLs the workers dial. Without a proxy
// for every server, it starts none.
func verifyProxies(flag string, urls []string, tf *tlsFiles, st store) ([]string, []*verify.Proxy) {
	if tf.set() || strings.HasPrefix(st.String(), "Redis Cluster") {
		return urls, nil
	}
	out := make([]string, len(urls))
	var proxies []*verify.Proxy
	closeAll := func() {
		for _, p := range proxies {
			p.Close()
		}
	}
	for i, raw := range urls {
		target, rewrite := proxyTarget(flag, raw)
		if target == "" {
			closeAll()
			return urls, nil
		}
		p, err := verify.NewProxy(target)
		if err != nil {
			closeAll()
			return urls, nil
		}
		proxies = append(proxies, p)
		out[i] = rewrite(p.Addr())
	}
	return out, proxies
}

// proxyTarget returns the host:port of the server raw names, and the function
// that writes raw with another address; "" when a plain proxy cannot stand in
// for it.
func proxyTarget(flag, raw string) (string, func(addr string) string) {
	if flag == "mysql" {
		// A DSN names its server in tcp(host:port); TLS (tls= in the
		// DSN, or --tls-*) checks the name, which a proxy does not keep.
		start := strings.Index(raw, "tcp(")
		end := strings.Index(raw[max(start, 0):], ")")
		if start < 0 || end < 0 || strings.Contains(raw, "tls=") {
			return "", nil
		}
		target := raw[start+4 : start+end]
		if _, _, err := net.SplitHostPort(target); err != nil {
			return "", nil
		}
		return target, func(addr string) string { return raw[:start+4] + addr + raw[start+end:] }
	}
	if !strings.Contains(raw, "://") {
		if flag == "redis" || strings.Contains(raw, "=") {
			return "", nil
		}
		if _, _, err := net.SplitHostPort(raw); err != nil {
			return "", nil
		}
		return raw, func(addr string) string { return addr }
	}
	u, err := url.Parse(raw)
	if err != nil || u.Port() == "" {
		return "", nil
	}
	switch u.Scheme {
	case "redis", "http", "etcd", "zk", "zookeeper", "nats":
	case "postgres", "postgresql":
		if m := u.Query().Get("sslmode"); m == "require" || m == "verify-ca" || m == "verify-full" {
			return "", nil
		}
	default:
		return "", nil
	}
	return u.Host, func(addr string) string {
		v := *u
		v.Host = addr
		return v.String()
	}
}

// heldUnder lists the locks under prefix; a PostgreSQL database without the
// lock table holds none.
func heldUnder(ctx context.Context, st store, prefix string) ([]lockInfo, error) {
	held, err := listLocks(ctx, st, prefix+"*")
	if errors.Is(err, pglock.ErrNoTable) || errors.Is(err, natslock.ErrNoBucket) {
		return nil, nil
	}
	return held, err
}

// verifyLeftover waits until none of the run's locks (keys) is held once the
// workers have ended (a TTL, and the store's own grace for abandoned
// acquisitions), and returns what is still held after that. Other locks under
// the prefix are not the run's: they are not looked at.
func verifyLeftover(ctx context.Context, st store, keys []string, ttl time.Duration) []string {
	start := time.Now()
	deadline := start.Add(ttl + 7*time.Second)
	for {
		held, err := heldUnder(ctx, st, strings.TrimSuffix(keys[0], "0")) // RUN0 -> RUN
		var left []string
		for _, li := range held {
			if !slices.Contains(keys, li.Key) || time.Since(start) > ttl && freedByNextAttempt(ctx, st, li.Key) {
				continue
			}
			left = append(left, li.Key)
		}
		if err != nil {
			left = append(left, "(listing failed: "+oneLine(err)+")")
		}
		if len(left) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return left
		}
		time.Sleep(200 * time.Millisecond) // polling the store's expiry
	}
}

// runTag returns a tag drawn for one run of dlock verify, which its lock names
// carry after the prefix: 8 base-36 digits.
func runTag() string {
	const digits = "0123456789abcdefghijklmnopqrstuvwxyz"
	b := make([]byte, 8)
	for i := range b {
		b[i] = digits[rand.IntN(len(digits))]
	}
	return string(b)
}

// runKeys returns the n lock names of a run whose names start with run (the
// prefix, the run's tag and '-'): RUN0 .. RUN<n-1>.
func runKeys(run string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s%d", run, i)
	}
	return keys
}

// freedByNextAttempt reports whether a new acquirer gets key, on a store whose
// lock outlives its holder's TTL until the next attempt removes it (a ZooKeeper
// node of a killed holder lives until its session expires, and the next attempt
// removes it once its TTL has passed by the server's clock); the lease it gets
// is released at once.
func freedByNextAttempt(ctx context.Context, st store, key string) bool {
	if _, ok := st.(*mutexStore); !ok {
		return false
	}
	l, err := st.locker(plainLock, 1)
	if err != nil {
		return false
	}
	lease, err := l.TryLock(ctx, key)
	if err != nil {
		return false
	}
	_ = lease.Unlock(ctx)
	return true
}

// purge deletes the entries of the locks named keys (the run's own, whose
// names carry the run's tag), on every server of st, and returns how many
// entries it removed. No other name is touched.
func purge(ctx context.Context, st store, keys []string) (int, error) {
	switch s := st.(type) {
	case *redisStore:
		if cc, ok := s.rdb.(*redis.ClusterClient); ok {
			// The entries of a lock live in its slot: each on one master.
			var n atomic.Int64
			err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
				m, err := purgeRedis(ctx, c, keys)
				n.Add(int64(m))
				return err
			})
			return int(n.Load()), err
		}
		return purgeRedis(ctx, s.rdb, keys)
	case *redlockStore:
		n := 0
		var errs []error
		for _, c := range s.rdbs {
			m, err := purgeRedis(ctx, c, keys)
			n += m
			errs = append(errs, err)
		}
		return n, errors.Join(errs...)
	case pgStore:
		return s.purge(ctx, keys)
	case mysqlStore:
		return s.purge(ctx, keys)
	case *mutexStore:
		return s.purge(ctx, keys)
	case natsStore:
		return s.purge(ctx, keys)
	}
	return 0, fmt.Errorf("cannot remove the run's entries from %s", st)
}

// purgeRedis deletes the entries of the locks named keys on one Redis server:
// for each, the keys under its hash tag (record, fence counter, waiting set,
// abandon marks).
func purgeRedis(ctx context.Context, c redis.UniversalClient, keys []string) (int, error) {
	n := 0
	for _, key := range keys {
		// A run's name holds no glob character (dlock verify checks the
		// prefix), and "}" ends it: RUN1 does not match RUN10's keys.
		iter := c.Scan(ctx, 0, redislock.LockKey(key)+"*", 500).Iterator()
		for iter.Next(ctx) {
			if err := c.Unlink(ctx, iter.Val()).Err(); err != nil {
				return n, err
			}
			n++
		}
		if err := iter.Err(); err != nil {
			return n, err
		}
	}
	return n, nil
}

// lastError returns the last error of the history h, else the last line the
// workers wrote on stderr (their logs in dir), else a note that there is none.
func lastError(h []verify.Event, dir string, workers int) string {
	for i := len(h) - 1; i >= 0; i-- {
		if h[i].Err != "" {
			return h[i].Err
		}
	}
	last := "none recorded"
	for i := range workers {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("w%02d.log", i)))
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if l := lines[len(lines)-1]; l != "" {
			last = l
		}
	}
	return last
}
