// Command bench measures dlock's Redis locks next to go-redsync/redsync,
// bsm/redislock, rueidis's rueidislock and a raw go-redis baseline, against a redis-server it starts on a
// free loopback port and stops when it is done.
//
// Run it from the repository root:
//
//	go -C bench run . [-quick] [-scenarios a,b,c] [-reps 3] [-json FILE]
//
// Scenarios (every variant gets a fresh go-redis client with the same options,
// variants are interleaved within each repetition, and the tables show medians
// over the repetitions):
//
//	a   uncontended: G goroutines, each locking and unlocking its own key
//	b   contended: G goroutines on one key, each critical section a non-atomic
//	    GET + SET increment of a shared counter; waits bounded at -wait; one
//	    locker (one dlock Client) shared by the goroutines
//	bc  scenario b with one locker (Client) per goroutine, as G processes would
//	    have, over the shared go-redis pool
//	bp  scenario b with G real processes (this binary started again as
//	    workers), at the G of -bp-g
//	c1  many waiters on one key: the waiters' idle cost, then the hand-over of the
//	    lock through all of them
//	c2  many keys with one waiter each: subscription connections, memory and
//	    commands per hand-over
//	r   Redlock over five masters (four more servers started for it) against
//	    redsync's Redlock and dlock on one of them: G=1 and G=8 uncontended,
//	    G=16 contended; not run unless asked for (-scenarios r)
//	s   K locks (-s-k, default 1,000 and 10,000) held with renewal in one
//	    process: round trips and server commands per lock per TTL, client CPU,
//	    goroutines and heap per lock, Redis bytes per lock, next to redsync and
//	    bsm with a renew goroutine per lock; not run unless asked for
//	p   the primitives (semaphore of 4 permits, read-write lock with one
//	    writer in 4 goroutines) next to the mutex, G goroutines on one key, each
//	    with a Client of its own: operations/s, commands per operation, Jain
//
// A last table checks the targets: uncontended cycles/s against raw, the fair
// lock's hand-overs, fairness and waits against the peers, lock commands per
// critical section, subscription connections, lost updates and overlaps.
//
// The redis-server executable is found in PATH, or named by $DLOCK_REDIS_SERVER.
// The tables go to standard output, with one JSON object per measurement and per
// target on a line of its own (or in the -json file); progress goes to standard
// error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// config is everything the flags set.
type config struct {
	scenarios  map[string]bool
	reps       int
	aDur, bDur time.Duration
	wait       time.Duration
	aG, bG, pG []int
	bpG        []int
	sK         []int
	sTTL       time.Duration
	cWaiters   int
	cKeys      int
	cPollCap   int
	cSettle    time.Duration
	warmUp     time.Duration // how long each variant on etcd, ZooKeeper, PostgreSQL, NATS or MySQL locks before the first measurement
	cDrain     time.Duration
	only       map[string]bool // variant names; empty means all
	jsonPath   string
	quick      bool
}

func defaultConfig() config {
	return config{
		scenarios: map[string]bool{"a": true, "b": true, "bc": true, "bp": true, "c": true, "p": true},
		reps:      3,
		aDur:      2 * time.Second,
		bDur:      4 * time.Second,
		wait:      2 * time.Second,
		aG:        []int{1, 8},
		bG:        []int{2, 4, 16, 64},
		pG:        []int{16, 64},
		bpG:       []int{16},
		sK:        []int{1000, 10000},
		sTTL:      6 * time.Second,
		cWaiters:  1000,
		cKeys:     10000,
		cPollCap:  1000,
		cSettle:   time.Second,
		warmUp:    time.Second,
		cDrain:    5 * time.Second,
	}
}

// quickConfig shortens everything so that a full pass takes well under a minute.
func quickConfig(c config) config {
	c.quick = true
	c.reps = 1
	c.aDur = 300 * time.Millisecond
	c.bDur = 600 * time.Millisecond
	c.cWaiters = 200
	c.cKeys = 1000
	c.cPollCap = 200
	c.cSettle = 300 * time.Millisecond
	c.warmUp = 300 * time.Millisecond
	c.cDrain = 2 * time.Second
	c.bpG = []int{4}
	c.sK = []int{1000}
	c.sTTL = 3 * time.Second
	return c
}

func main() {
	if len(os.Args) > 2 && os.Args[1] == natsServerFlag {
		if err := natsServerMain(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, "bench nats server:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == workerFlag {
		if err := workerMain(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "bench worker:", err)
			os.Exit(1)
		}
		return
	}
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	jw := io.Writer(os.Stdout)
	if cfg.jsonPath != "" {
		f, err := os.Create(cfg.jsonPath)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer f.Close()
		jw = f
	}
	if _, err := run(ctx, cfg, os.Stdout, jw, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string, errOut io.Writer) (config, error) {
	cfg := defaultConfig()
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(errOut)
	quick := fs.Bool("quick", false, "smoke-test sizes: one repetition, short runs, 200 waiters, 1,000 keys")
	scen := fs.String("scenarios", "a,b,bc,bp,c,p", "scenarios to run, comma separated: a, b, bc, bp, c, p, r (Redlock over 5 masters, not run by default), s (K locks held with renewal, not run by default)")
	reps := fs.Int("reps", 0, "repetitions of every measurement (default 3, 1 with -quick)")
	aDur := fs.Duration("a-dur", 0, "duration of each uncontended run (default 2s)")
	bDur := fs.Duration("b-dur", 0, "duration of each contended run (default 4s)")
	wait := fs.Duration("wait", cfg.wait, "longest wait of one acquire in scenario b; longer waits count as timed out")
	aG := fs.String("a-g", "1,8", "goroutine counts of scenario a")
	bG := fs.String("b-g", "2,4,16,64", "goroutine counts of scenarios b and bc")
	bpG := fs.String("bp-g", "", "process counts of scenario bp (default 16, 4 with -quick)")
	pG := fs.String("p-g", "16,64", "goroutine counts of scenario p (its runs last -b-dur)")
	cWaiters := fs.Int("c-waiters", 0, "waiters on one key in scenario c1 (default 1000)")
	cKeys := fs.Int("c-keys", 0, "keys with one waiter each in scenario c2 (default 10000)")
	cPollCap := fs.Int("c-poll-cap", 0, "most waiters given to a polling locker in scenario c (default 1000)")
	cSettle := fs.Duration("c-settle", 0, "window over which scenario c measures the idle waiters, once their command rate is steady (default 1s)")
	cDrain := fs.Duration("c-drain", 0, "longest hand-over phase of scenario c (default 5s)")
	sTTL := fs.Duration("s-ttl", 0, "lease time of scenario s, renewed every third of it, and its measurement window (default 6s, 3s with -quick)")
	sK := fs.String("s-k", "", "lock counts of scenario s (default 1000,10000; 1000 with -quick)")
	only := fs.String("variants", "", "comma-separated variant names to run (default all)")
	fs.StringVar(&cfg.jsonPath, "json", "", "write the JSON lines to this file instead of standard output")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("bench: unexpected argument %q", fs.Arg(0))
	}
	if *quick {
		cfg = quickConfig(cfg)
	}
	setIf(&cfg.reps, *reps)
	setIf(&cfg.aDur, *aDur)
	setIf(&cfg.bDur, *bDur)
	setIf(&cfg.cWaiters, *cWaiters)
	setIf(&cfg.cKeys, *cKeys)
	setIf(&cfg.cPollCap, *cPollCap)
	setIf(&cfg.cSettle, *cSettle)
	setIf(&cfg.cDrain, *cDrain)
	setIf(&cfg.sTTL, *sTTL)
	cfg.wait = *wait
	var err error
	if cfg.aG, err = parseInts(*aG); err != nil {
		return cfg, fmt.Errorf("bench: -a-g: %w", err)
	}
	if cfg.bG, err = parseInts(*bG); err != nil {
		return cfg, fmt.Errorf("bench: -b-g: %w", err)
	}
	if cfg.pG, err = parseInts(*pG); err != nil {
		return cfg, fmt.Errorf("bench: -p-g: %w", err)
	}
	if *bpG != "" {
		if cfg.bpG, err = parseInts(*bpG); err != nil {
			return cfg, fmt.Errorf("bench: -bp-g: %w", err)
		}
	}
	if *sK != "" {
		if cfg.sK, err = parseInts(*sK); err != nil {
			return cfg, fmt.Errorf("bench: -s-k: %w", err)
		}
	}
	cfg.scenarios = map[string]bool{}
	for _, s := range splitList(*scen) {
		if s != "a" && s != "b" && s != "bc" && s != "bp" && s != "c" && s != "p" && s != "r" && s != "s" {
			return cfg, fmt.Errorf("bench: unknown scenario %q (want a, b, bc, bp, c, p, r or s)", s)
		}
		cfg.scenarios[s] = true
	}
	if len(cfg.scenarios) == 0 {
		return cfg, errors.New("bench: no scenario selected")
	}
	cfg.only = map[string]bool{}
	for _, v := range splitList(*only) {
		if !knownVariant(v) && !slices.ContainsFunc(scaleVariants, func(s scaleVariant) bool { return s.name == v }) {
			return cfg, fmt.Errorf("bench: unknown variant %q", v)
		}
		cfg.only[v] = true
	}
	if cfg.reps < 1 || cfg.wait <= 0 || cfg.cWaiters < 1 || cfg.cKeys < 1 || cfg.cPollCap < 1 ||
		cfg.aDur <= 0 || cfg.bDur <= 0 || cfg.sTTL <= 0 || cfg.cSettle <= 0 || cfg.cDrain <= 0 {
		return cfg, errors.New("bench: counts and durations must be positive")
	}
	return cfg, nil
}

func setIf[T int | time.Duration](dst *T, v T) {
	if v != 0 {
		*dst = v
	}
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive count", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("no counts")
	}
	return out, nil
}

func knownVariant(name string) bool {
	for _, v := range variants {
		if v.name == name {
			return true
		}
	}
	return false
}
