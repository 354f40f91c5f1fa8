package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/redislock"
	"github.com/dlock-go/dlock/redlock"
	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// redlockNodes is the number of masters scenario r runs on.
const redlockNodes = 5

// redlockVariant is one locker of scenario r, opened on the node clients.
type redlockVariant struct {
	name, desc string
	open       func(nodes []*redis.Client) (locker, error)
}

var redlockVariants = []redlockVariant{
	{"dlock/1", "redislock.New on node 0 alone, all defaults",
		func(n []*redis.Client) (locker, error) { return openDlock(redislock.New(n[0])) }},
	{"redlock/5", "redlock.New over the 5 masters, all defaults",
		func(n []*redis.Client) (locker, error) { return openDlock(redlock.New(universal(n))) }},
	{"redsync/5", "redsync v4 over the 5 masters (one goredis/v9 pool each), defaults; tries unbounded",
		func(n []*redis.Client) (locker, error) {
			pools := make([]rsredis.Pool, len(n))
			for i, rdb := range n {
				pools[i] = goredis.NewPool(rdb)
			}
			return redsyncLocker{rs: redsync.New(pools...), opts: []redsync.Option{redsync.WithTries(1 << 30)}}, nil
		}},
}

func universal(n []*redis.Client) []redis.UniversalClient {
	out := make([]redis.UniversalClient, len(n))
	for i, c := range n {
		out[i] = c
	}
	return out
}

// redlockLoad is one load of scenario r.
type redlockLoad struct {
	name      string
	g         int
	contended bool // all goroutines on one key
	perClient bool // each goroutine with node clients and a locker of its own, as a process
}

var redlockLoads = []redlockLoad{{"G=1", 1, false, false}, {"G=8", 8, false, false}, {"G=16 contended", 16, true, false},
	{"G=16 contended, a Client each", 16, true, true}}

// redlockResult is one run, or the median of one variant under one load.
type redlockResult struct {
	cyclesPerSec   float64
	handoffsPerSec float64 // cycles by another goroutine than the one before
	jain           float64 // Jain's index over the goroutines' cycles
	cmdsPerNode    float64 // commands per lock cycle on the busiest node
	timeouts       int64
}

// rate is what a load measures: hand-overs per second when contended, cycles
// per second otherwise.
func (ld redlockLoad) rate(r redlockResult) float64 {
	if ld.contended {
		return r.handoffsPerSec
	}
	return r.cyclesPerSec
}

// runRedlock is scenario r: five masters (the bench's server and four more), each
// variant under each load for cfg.aDur, cfg.reps times, variants interleaved.
func (e *env) runRedlock(ctx context.Context, dir string, out io.Writer) error {
	addrs := []string{e.addr}
	for i := 1; i < redlockNodes; i++ {
		sub := filepath.Join(dir, "r"+strconv.Itoa(i))
		if err := os.Mkdir(sub, 0o755); err != nil {
			return err
		}
		srv, err := testserver.NewRedis(sub)
		if err != nil {
			return err
		}
		defer srv.Stop()
		addrs = append(addrs, srv.Addr)
	}
	admins := make([]*redis.Client, len(addrs))
	for i, a := range addrs {
		admins[i] = redis.NewClient(&redis.Options{Addr: a})
		defer admins[i].Close()
	}
	fmt.Fprintf(out, "\n## r: Redlock over %d masters on this host\n\n", redlockNodes)
	for _, v := range redlockVariants {
		fmt.Fprintf(out, "- %s: %s\n", v.name, v.desc)
	}
	results := map[string]map[string]redlockResult{}
	ratios := map[string]map[string][]float64{} // per repetition, redlock/5 over the other
	for _, ld := range redlockLoads {
		runs := map[string][]redlockResult{}
		for rep := 0; rep < e.cfg.reps; rep++ {
			for _, v := range redlockVariants {
				e.logf("r %s %s rep %d", ld.name, v.name, rep+1)
				r, err := e.redlockRun(ctx, v, ld, addrs, admins)
				if err != nil {
					return fmt.Errorf("r %s %s: %w", ld.name, v.name, err)
				}
				runs[v.name] = append(runs[v.name], r)
			}
		}
		results[ld.name] = map[string]redlockResult{}
		ratios[ld.name] = map[string][]float64{}
		for rep := range runs["redlock/5"] {
			for _, other := range []string{"redsync/5", "dlock/1"} {
				if o := ld.rate(runs[other][rep]); o > 0 {
					ratios[ld.name][other] = append(ratios[ld.name][other], ld.rate(runs["redlock/5"][rep])/o)
				}
			}
		}
		for name, rs := range runs {
			slices.SortFunc(rs, func(a, b redlockResult) int { return cmp.Compare(ld.rate(a), ld.rate(b)) })
			results[ld.name][name] = rs[len(rs)/2]
		}
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(out, "\nlock cycles/s (median of %d; contended: hand-overs/s, Jain's index), lock commands per cycle on the busiest node, wait timeouts:\n\n", e.cfg.reps)
	fmt.Fprintln(tw, "load\t"+strings.Join(redlockNames(), "\t")+"\t")
	for _, ld := range redlockLoads {
		row := []string{ld.name}
		for _, v := range redlockVariants {
			r := results[ld.name][v.name]
			cell := fmt.Sprintf("%.0f/s %.1f cmd", r.cyclesPerSec, r.cmdsPerNode)
			if ld.contended {
				cell = fmt.Sprintf("%.0f/s J %.2f %.1f cmd", r.handoffsPerSec, r.jain, r.cmdsPerNode)
			}
			if r.timeouts > 0 {
				cell += fmt.Sprintf(" %d t/o", r.timeouts)
			}
			row = append(row, cell)
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "redlock/5 over the others, the median of the ratios within each repetition (the ratios in brackets):")
	fmt.Fprintln(out)
	for _, ld := range redlockLoads {
		rs, one := ratios[ld.name]["redsync/5"], ratios[ld.name]["dlock/1"]
		fmt.Fprintf(out, "- %s: %.2fx redsync/5 %s, %.2fx dlock/1 %s\n", ld.name, median(rs), bracket(rs), median(one), bracket(one))
	}
	return nil
}

// bracket lists xs as (a / b / c).
func bracket(xs []float64) string {
	var parts []string
	for _, x := range xs {
		parts = append(parts, fmt.Sprintf("%.2f", x))
	}
	return "(" + strings.Join(parts, " / ") + ")"
}

func redlockNames() []string {
	var out []string
	for _, v := range redlockVariants {
		out = append(out, v.name)
	}
	return out
}

// redlockRun measures one variant under one load.
func (e *env) redlockRun(ctx context.Context, v redlockVariant, ld redlockLoad, addrs []string, admins []*redis.Client) (redlockResult, error) {
	lockers := make([]locker, 1, ld.g)
	var conns []*redis.Client
	defer func() {
		for _, l := range lockers {
			if l != nil {
				closeLocker(l)
			}
		}
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	open := func() (locker, error) {
		nodes := make([]*redis.Client, len(addrs))
		for i, a := range addrs {
			nodes[i] = redis.NewClient(&redis.Options{Addr: a})
			conns = append(conns, nodes[i])
		}
		return v.open(nodes)
	}
	var err error
	if lockers[0], err = open(); err != nil {
		return redlockResult{}, err
	}
	for ld.perClient && len(lockers) < ld.g {
		l, err := open()
		if err != nil {
			return redlockResult{}, err
		}
		lockers = append(lockers, l)
	}
	prefix := e.prefix("r")
	before, err := commandCounts(ctx, admins)
	if err != nil {
		return redlockResult{}, err
	}
	var cycles, timeouts, handoffs, last atomic.Int64
	last.Store(-1)
	per := make([]int64, ld.g)
	runCtx, cancel := context.WithTimeout(ctx, e.cfg.aDur)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, ld.g)
	for i := 0; i < ld.g; i++ {
		key := prefix + strconv.Itoa(i)
		if ld.contended {
			key = prefix + "one"
		}
		m := lockers[min(i, len(lockers)-1)].mutex(key)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !over(runCtx) {
				wctx, wcancel := context.WithTimeout(runCtx, e.cfg.wait)
				err := m.lock(wctx)
				wcancel()
				if err != nil {
					if over(runCtx) {
						return
					}
					if errors.Is(err, errNotObtained) || errors.Is(err, context.DeadlineExceeded) {
						if timeouts.Add(1) == 1 {
							e.logf("r: first timeout: %v", err)
						}
						continue
					}
					errc <- err
					return
				}
				if last.Swap(int64(i)) != int64(i) {
					handoffs.Add(1)
				}
				if err := m.unlock(context.WithoutCancel(runCtx)); err != nil {
					errc <- err
					return
				}
				cycles.Add(1)
				per[i]++
			}
		}()
	}
	start := time.Now()
	wg.Wait()
	el := time.Since(start)
	close(errc)
	if err := <-errc; err != nil {
		return redlockResult{}, err
	}
	after, err := commandCounts(ctx, admins)
	if err != nil {
		return redlockResult{}, err
	}
	n := cycles.Load()
	r := redlockResult{cyclesPerSec: float64(n) / el.Seconds(), handoffsPerSec: float64(handoffs.Load()) / el.Seconds(),
		jain: jain(per), timeouts: timeouts.Load()}
	if n > 0 {
		for i := range admins {
			r.cmdsPerNode = max(r.cmdsPerNode, float64(after[i]-before[i]-1)/float64(n)) // less the INFO itself
		}
	}
	return r, nil
}

// commandCounts reads total_commands_processed on every node.
func commandCounts(ctx context.Context, admins []*redis.Client) ([]int64, error) {
	out := make([]int64, len(admins))
	for i, a := range admins {
		info, err := a.Info(ctx, "stats").Result()
		if err != nil {
			return nil, err
		}
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_commands_processed:"); ok {
				out[i], _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	return out, nil
}
