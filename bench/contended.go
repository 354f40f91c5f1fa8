package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// counter is the shared state of a critical section protected by the lock under
// test: a Redis counter incremented with a non-atomic GET + SET, and local checks
// that no two goroutines are ever inside at once.
type counter struct {
	rdb      *redis.Client
	key      string
	inside   atomic.Int32
	overlaps atomic.Int64
	acked    atomic.Int64
	last     atomic.Int64 // goroutine of the last critical section, -1 before the first
	handoffs atomic.Int64
}

func newCounter(rdb *redis.Client, key string) *counter {
	c := &counter{rdb: rdb, key: key}
	c.last.Store(-1)
	return c
}

// increment runs one critical section for goroutine id and reports whether the
// increment was acknowledged by the server. Its commands are counted as work.
func (c *counter) increment(ctx context.Context, id int64) error {
	if c.inside.Add(1) != 1 {
		c.overlaps.Add(1)
	}
	defer c.inside.Add(-1)
	if p := c.last.Swap(id); p >= 0 && p != id {
		c.handoffs.Add(1)
	}
	wctx := workContext(ctx)
	n, err := c.rdb.Get(wctx, c.key).Int64()
	if errors.Is(err, redis.Nil) {
		n, err = 0, nil
	}
	if err != nil {
		return err
	}
	if err := c.rdb.Set(wctx, c.key, n+1, 0).Err(); err != nil {
		return err
	}
	c.acked.Add(1)
	return nil
}

// lost returns the acknowledged increments missing from the counter.
func (c *counter) lost(ctx context.Context, admin *redis.Client) (int64, error) {
	n, err := admin.Get(ctx, c.key).Int64()
	if errors.Is(err, redis.Nil) {
		n, err = 0, nil
	}
	return c.acked.Load() - n, err
}

// runSharedClient is scenario b: g goroutines contending for one key, each critical section
// one increment of a shared counter, for the configured duration. Each acquire
// waits at most cfg.wait; waits cut short by the end of the run are not counted.
func (e *env) runSharedClient(ctx context.Context, v variant, g int) (metrics, error) {
	return e.contended(ctx, v, g, false)
}

// runClientEach is scenario bc: scenario b with one locker (one dlock Client, one
// subscription, one in-process queue) per goroutine over the shared go-redis
// pool, as G separate processes would be, as far as the lock can tell.
func (e *env) runClientEach(ctx context.Context, v variant, g int) (metrics, error) {
	return e.contended(ctx, v, g, true)
}

// contended runs scenario b with one locker for all goroutines, or one each.
func (e *env) contended(ctx context.Context, v variant, g int, perGoroutine bool) (metrics, error) {
	ms, err := e.openMeasured(v, "bench")
	if err != nil {
		return nil, err
	}
	defer ms.close()
	lockers := make([]locker, g)
	defer func() {
		for _, lk := range lockers[1:] {
			if lk != nil && perGoroutine {
				closeLocker(lk)
			}
		}
	}()
	for i := range lockers {
		lockers[i] = ms.lk
		if perGoroutine && i > 0 {
			if lockers[i], err = v.open(ms.opening()); err != nil {
				return nil, err
			}
		}
	}
	srvCPU0, err := e.lockServerCPU(ctx, v.on)
	if err != nil {
		return nil, err
	}
	disk0 := e.readDisk(ctx, v.on)
	prefix := e.prefix("b")
	key := prefix + "lock"
	ctr := newCounter(ms.rdb, prefix+"counter")
	r0, err := ms.read(ctx)
	if err != nil {
		return nil, err
	}

	var mem0 runtime.MemStats
	runtime.ReadMemStats(&mem0)
	runCtx, stop := context.WithTimeout(ctx, e.cfg.bDur)
	defer stop()
	per := make([]int64, g)
	waits := make([][]time.Duration, g)
	works := make([][]time.Duration, g)
	var timeouts, errs, unlockErrs atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i := range g {
		m := lockers[i].mutex(key)
		wg.Go(func() {
			for !over(runCtx) {
				t0 := time.Now()
				if !e.lockWithin(runCtx, m, &timeouts, &errs) {
					continue
				}
				t1 := time.Now()
				// The critical section and the release finish even when the run
				// ends meanwhile.
				if err := ctr.increment(ctx, int64(i)); err != nil {
					errs.Add(1)
				} else {
					per[i]++
				}
				t2 := time.Now()
				if err := m.unlock(ctx); err != nil {
					unlockErrs.Add(1)
				}
				waits[i] = append(waits[i], t1.Sub(t0))
				works[i] = append(works[i], t2.Sub(t1))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	var mem1 runtime.MemStats
	runtime.ReadMemStats(&mem1)
	used, err := ms.usedSince(ctx, r0)
	if err != nil {
		return nil, err
	}
	srvCPU1, err := e.lockServerCPU(ctx, v.on)
	if err != nil {
		return nil, err
	}
	lost, err := ctr.lost(ctx, e.admin)
	if err != nil {
		return nil, err
	}
	var cs int64
	for _, n := range per {
		cs += n
	}
	w := slices.Concat(waits...)
	slices.Sort(w)
	wk := slices.Concat(works...)
	slices.Sort(wk)
	csTime := percentile(wk, 0.5)
	n := float64(cs)
	m := metrics{
		"cs":                   n,
		"cs_per_s":             n / elapsed.Seconds(),
		"handoffs":             float64(ctr.handoffs.Load()),
		"handoffs_per_s":       float64(ctr.handoffs.Load()) / elapsed.Seconds(),
		"handoff_pct":          100 * ratio(float64(ctr.handoffs.Load()), n),
		"wait_p50_ms":          millis(percentile(w, 0.50)),
		"wait_p99_ms":          millis(percentile(w, 0.99)),
		"wait_max_ms":          millis(percentile(w, 1)),
		"cs_p50_us":            micros(csTime),
		"wait_max_per_g_cs":    ratio(float64(percentile(w, 1)), float64(g)*float64(csTime)),
		"timeouts":             float64(timeouts.Load()),
		"jain":                 jain(per),
		"lost":                 float64(lost),
		"overlaps":             float64(ctr.overlaps.Load()),
		"cmds_per_cs_client":   ratio(float64(used.client), n),
		"cmds_per_cs_server":   ratio(float64(used.lockServer()), n),
		"server_cpu_us_per_cs": ratio(float64(srvCPU1-srvCPU0)/float64(time.Microsecond), n),
		// The whole process's allocations, the critical sections' and the
		// samples' included.
		"allocs_per_cs": ratio(float64(mem1.Mallocs-mem0.Mallocs), n),
		"errors":        float64(errs.Load()),
		"unlock_errors": float64(unlockErrs.Load()),
	}
	e.readDisk(ctx, v.on).since(disk0).add(m, n, "cs")
	return m, nil
}

// over reports whether the run of ctx is over: ctx ended, or its deadline
// passed. A context's timer can fire late on a loaded machine, while a lock
// call already sees the deadline passed and gives up at once: such give-ups
// at the end of a run are not timeouts.
func over(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// lockWithin takes m, waiting at most cfg.wait, and reports whether it holds
// it. A wait that ends without the lock counts as timed out, unless runCtx ended
// it (the end of a run); any other failure counts as an error.
func (e *env) lockWithin(runCtx context.Context, m mutex, timeouts, errs *atomic.Int64) bool {
	wctx, cancel := context.WithTimeout(runCtx, e.cfg.wait)
	err := m.lock(wctx)
	cancel()
	switch {
	case err == nil:
		return true
	case over(runCtx): // the run ended during the wait
	case errors.Is(err, errNotObtained) || wctx.Err() != nil:
		timeouts.Add(1)
	default:
		errs.Add(1)
		time.Sleep(errorPause)
	}
	return false
}

func tableSharedClient(out io.Writer, g int, ms []measurement) {
	tableContended(out, fmt.Sprintf("b. one key, G = %d goroutines sharing one Client, GET+SET increment inside the lock (medians)", g), ms)
}

// tableContended is the table of a contended scenario (b, bc, bp).
func tableContended(out io.Writer, title string, ms []measurement) {
	table(out, title, ms, []column{
		{"CS/s", "cs_per_s", "%.0f"},
		{"handoffs/s", "handoffs_per_s", "%.0f"},
		{"handoff %", "handoff_pct", "%.1f"},
		{"wait p50 ms", "wait_p50_ms", "%.2f"},
		{"p99 ms", "wait_p99_ms", "%.1f"},
		{"max ms", "wait_max_ms", "%.1f"},
		{"max/(G·CS)", "wait_max_per_g_cs", "%.1f"},
		{"timed out", "timeouts", "%.0f"},
		{"Jain", "jain", "%.2f"},
		{"lost", "lost", "%.0f"},
		{"overlaps", "overlaps", "%.0f"},
		{"cmds/CS client", "cmds_per_cs_client", "%.2f"},
		{"server", "cmds_per_cs_server", "%.2f"},
		{"server CPU µs/CS", "server_cpu_us_per_cs", "%.1f"},
		{"allocs/CS", "allocs_per_cs", "%.0f"},
		{"errors", "errors", "%.0f"},
	})
}
