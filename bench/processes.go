package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// workerFlag, as the first argument, makes the bench binary a worker process of
// scenario bp.
const workerFlag = "-bench-worker"

// workerResult is what a worker process reports on its standard output.
type workerResult struct {
	CS         int64     `json:"cs"`
	Handoffs   int64     `json:"handoffs"`
	Overlaps   int64     `json:"overlaps"`
	Timeouts   int64     `json:"timeouts"`
	Errors     int64     `json:"errors"`
	UnlockErrs int64     `json:"unlock_errors"`
	LockCmds   int64     `json:"lock_cmds"`
	WaitsMS    []float64 `json:"waits_ms"`
	CSMicros   []float64 `json:"cs_us"`
}

// runProcesses is scenario bp: scenario b with each contender a process of its own (this
// binary started again as a worker), to confirm scenario bc's figures with real
// processes. Handoffs and overlaps are tracked in Redis (a last-holder key and an
// in-section counter), as work.
func (e *env) runProcesses(ctx context.Context, v variant, g int) (metrics, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	prefix := e.prefix("bp")
	srvCPU0, err := serverCPU(ctx, e.admin)
	if err != nil {
		return nil, err
	}
	srv0, err := serverCalls(ctx, e.admin)
	if err != nil {
		return nil, err
	}
	// Every worker starts, connects and opens its locker, then waits for the
	// go line on its standard input, so that start-up is not measured.
	type proc struct {
		cmd *exec.Cmd
		in  io.WriteCloser
		out *bufio.Reader
	}
	procs := make([]proc, g)
	defer func() {
		for _, p := range procs {
			if p.cmd != nil && p.cmd.Process != nil {
				_ = p.cmd.Process.Kill()
				_ = p.cmd.Wait()
			}
		}
	}()
	for i := range procs {
		cmd := exec.CommandContext(ctx, exe, workerFlag, "-addr", e.addr, "-variant", v.name, "-prefix", prefix,
			"-id", strconv.Itoa(i), "-dur", e.cfg.bDur.String(), "-wait", e.cfg.wait.String())
		cmd.Stderr = e.logw
		in, err := cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		procs[i] = proc{cmd: cmd, in: in, out: bufio.NewReader(out)}
		if line, err := procs[i].out.ReadString('\n'); err != nil || line != "ready\n" {
			return nil, fmt.Errorf("worker %d did not start: %q %v", i, line, err)
		}
	}
	start := time.Now()
	for _, p := range procs {
		if _, err := io.WriteString(p.in, "go\n"); err != nil {
			return nil, err
		}
	}
	results := make([]workerResult, g)
	var wg sync.WaitGroup
	errs := make([]error, g)
	for i, p := range procs {
		wg.Go(func() {
			errs[i] = json.NewDecoder(p.out).Decode(&results[i])
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("worker result: %w", err)
	}
	for i := range procs {
		err := procs[i].cmd.Wait()
		procs[i].cmd = nil
		if err != nil {
			return nil, fmt.Errorf("worker %d: %w", i, err)
		}
	}
	srvCPU1, err := serverCPU(ctx, e.admin)
	if err != nil {
		return nil, err
	}
	srv1, err := serverCalls(ctx, e.admin)
	if err != nil {
		return nil, err
	}
	n, err := e.admin.Get(ctx, prefix+"counter").Int64()
	if errors.Is(err, redis.Nil) {
		err = nil
	}
	if err != nil {
		return nil, err
	}
	var cs, handoffs, overlaps, timeouts, errCount, unlockErrs, lockCmds int64
	per := make([]int64, g)
	var waits, works []time.Duration
	for i, r := range results {
		per[i] = r.CS
		cs += r.CS
		handoffs += r.Handoffs
		overlaps += r.Overlaps
		timeouts += r.Timeouts
		errCount += r.Errors
		unlockErrs += r.UnlockErrs
		lockCmds += r.LockCmds
		for _, w := range r.WaitsMS {
			waits = append(waits, time.Duration(w*float64(time.Millisecond)))
		}
		for _, w := range r.CSMicros {
			works = append(works, time.Duration(w*float64(time.Microsecond)))
		}
	}
	slices.Sort(waits)
	slices.Sort(works)
	csTime := percentile(works, 0.5)
	f := float64(cs)
	// Work per critical section on the server: GET, SET, INCR, DECR and GETSET.
	const workCmds = 5
	return metrics{
		"cs":                   f,
		"cs_per_s":             f / elapsed.Seconds(),
		"handoffs":             float64(handoffs),
		"handoffs_per_s":       float64(handoffs) / elapsed.Seconds(),
		"handoff_pct":          100 * ratio(float64(handoffs), f),
		"wait_p50_ms":          millis(percentile(waits, 0.50)),
		"wait_p99_ms":          millis(percentile(waits, 0.99)),
		"wait_max_ms":          millis(percentile(waits, 1)),
		"cs_p50_us":            micros(csTime),
		"wait_max_per_g_cs":    ratio(float64(percentile(waits, 1)), float64(g)*float64(csTime)),
		"timeouts":             float64(timeouts),
		"jain":                 jain(per),
		"lost":                 f - float64(n),
		"overlaps":             float64(overlaps),
		"cmds_per_cs_client":   ratio(float64(lockCmds), f),
		"cmds_per_cs_server":   ratio(float64(srv1-srv0)-workCmds*f, f),
		"server_cpu_us_per_cs": ratio(float64(srvCPU1-srvCPU0)/float64(time.Microsecond), f),
		"errors":               float64(errCount),
		"unlock_errors":        float64(unlockErrs),
	}, nil
}

// workerMain runs one contender of scenario bp and reports a workerResult.
func workerMain(args []string) error {
	fs := flag.NewFlagSet("bench worker", flag.ContinueOnError)
	addr := fs.String("addr", "", "redis-server address")
	name := fs.String("variant", "", "variant name")
	prefix := fs.String("prefix", "", "key prefix of the run")
	id := fs.Int("id", 0, "worker number")
	dur := fs.Duration("dur", time.Second, "run time")
	wait := fs.Duration("wait", 2*time.Second, "longest wait of one acquire")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var v *variant
	for i := range variants {
		if variants[i].name == *name {
			v = &variants[i]
		}
	}
	if v == nil {
		return fmt.Errorf("unknown variant %q", *name)
	}
	rdb := redis.NewClient(&redis.Options{Addr: *addr, ClientName: "bench"})
	defer rdb.Close()
	cnt := &cmdCounter{}
	rdb.AddHook(cnt)
	lk, err := v.open(opening{rdb: rdb, cnt: cnt})
	if err != nil {
		return err
	}
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return err
	}
	fmt.Println("ready")
	if line, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil || line != "go\n" {
		return fmt.Errorf("no go line: %q %v", line, err)
	}
	m := lk.mutex(*prefix + "lock")
	var r workerResult
	me := strconv.Itoa(*id)
	runCtx, stop := context.WithTimeout(ctx, *dur)
	defer stop()
	for !over(runCtx) {
		t0 := time.Now()
		wctx, cancel := context.WithTimeout(runCtx, *wait)
		err := m.lock(wctx)
		cancel()
		if err != nil {
			switch {
			case over(runCtx):
			case errors.Is(err, errNotObtained) || wctx.Err() != nil:
				r.Timeouts++
			default:
				r.Errors++
				time.Sleep(errorPause)
			}
			continue
		}
		t1 := time.Now()
		if err := workerSection(workContext(ctx), rdb, *prefix, me, &r); err != nil {
			r.Errors++
		}
		t2 := time.Now()
		if err := m.unlock(ctx); err != nil {
			r.UnlockErrs++
		}
		r.WaitsMS = append(r.WaitsMS, float64(t1.Sub(t0))/float64(time.Millisecond))
		r.CSMicros = append(r.CSMicros, float64(t2.Sub(t1))/float64(time.Microsecond))
	}
	r.LockCmds = cnt.lock.Load()
	return json.NewEncoder(os.Stdout).Encode(r)
}

// workerSection is one critical section of a worker: the non-atomic increment,
// with the overlap and hand-over bookkeeping in Redis.
func workerSection(ctx context.Context, rdb *redis.Client, prefix, me string, r *workerResult) error {
	in, err := rdb.Incr(ctx, prefix+"inside").Result()
	if err != nil {
		return err
	}
	defer rdb.Decr(ctx, prefix+"inside")
	if in != 1 {
		r.Overlaps++
	}
	if last, err := rdb.SetArgs(ctx, prefix+"last", me, redis.SetArgs{Get: true}).Result(); err == nil && last != me {
		r.Handoffs++
	}
	n, err := rdb.Get(ctx, prefix+"counter").Int64()
	if errors.Is(err, redis.Nil) {
		n, err = 0, nil
	}
	if err != nil {
		return err
	}
	if err := rdb.Set(ctx, prefix+"counter", n+1, 0).Err(); err != nil {
		return err
	}
	r.CS++
	return nil
}
