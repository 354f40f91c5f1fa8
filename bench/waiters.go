package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// steadyMax bounds the wait for scenario c's waiters to reach a steady state.
const steadyMax = 10 * time.Second

// setupWorkers is the parallelism of scenario set-up and tear-down loops.
const setupWorkers = 16

// Client names of scenario c: the waiters' client is the one measured; the
// holders lock through a client of their own.
const (
	waitersName = "bench-waiters"
	holdersName = "bench-holders"
)

// waiterRun is the shared bookkeeping of scenario c.
type waiterRun struct {
	*measured           // the waiters'
	holders   *measured // the holders', on a client of their own
	n         int       // waiters
	started   atomic.Int64
	acquired  atomic.Int64
	errs      atomic.Int64
	allDone   chan struct{}
}

func (e *env) newWaiterRun(v variant, n int) (*waiterRun, error) {
	waiters, err := e.openMeasured(v, waitersName)
	if err != nil {
		return nil, err
	}
	holders, err := e.openMeasured(v, holdersName)
	if err != nil {
		waiters.close()
		return nil, err
	}
	if !waiters.lk.notified() && n > e.cfg.cPollCap {
		n = e.cfg.cPollCap
	}
	return &waiterRun{measured: waiters, holders: holders, n: n, allDone: make(chan struct{})}, nil
}

func (w *waiterRun) close() {
	w.measured.close()
	w.holders.close()
}

// wait starts one waiter on m: it waits until it holds the lock or ctx ends, then
// runs cs (if any) and releases.
func (w *waiterRun) wait(ctx context.Context, wg *sync.WaitGroup, m mutex, cs func() error) {
	wg.Go(func() {
		w.started.Add(1)
		err := m.lock(ctx)
		if err != nil {
			if ctx.Err() == nil {
				w.errs.Add(1)
			}
			return
		}
		if cs != nil {
			if err := cs(); err != nil {
				w.errs.Add(1)
			}
		}
		if err := m.unlock(context.WithoutCancel(ctx)); err != nil {
			w.errs.Add(1)
		}
		if w.acquired.Add(1) == int64(w.n) {
			close(w.allDone)
		}
	})
}

// settle lets the started waiters reach their steady state and measures what
// they cost meanwhile: commands per second while nobody releases, memory,
// connections and pub/sub channels. base is the live memory before the waiters.
func (w *waiterRun) settle(ctx context.Context, base int64) (metrics, error) {
	// Bounded: every waiter goroutine increments started before it blocks.
	for i := 0; w.started.Load() < int64(w.n); i++ {
		if i > 10000 || ctx.Err() != nil {
			return nil, fmt.Errorf("only %d of %d waiters started", w.started.Load(), w.n)
		}
		time.Sleep(time.Millisecond)
	}
	if err := w.steady(ctx); err != nil {
		return nil, err
	}
	r0, err := w.read(ctx)
	if err != nil {
		return nil, err
	}
	time.Sleep(w.e.cfg.cSettle)
	idle, err := w.usedSince(ctx, r0)
	if err != nil {
		return nil, err
	}
	mem := liveBytes() - base
	cs, err := clientConns(ctx, w.e.admin, waitersName)
	if err != nil {
		return nil, err
	}
	return metrics{
		"waiters":                float64(w.n),
		"idle_cmds_per_s_client": float64(idle.client) / idle.d.Seconds(),
		"idle_cmds_per_s_server": float64(idle.lockServer()) / idle.d.Seconds(),
		"bytes_per_waiter":       float64(mem) / float64(w.n),
		"conns":                  float64(cs.total),
		"sub_conns":              float64(cs.sub),
		"channels":               float64(idle.channels),
	}, nil
}

// steadyWindow and steadySamples set how steady waits for a steady state.
const (
	steadyWindow  = 100 * time.Millisecond
	steadySamples = 5
)

// steady waits until the waiters have stopped changing their subscriptions and
// their command rate (client and server side) is steady: the number of
// subscribed channels has not changed over the samples compared, and either the
// last steadySamples steadyWindow samples of the command count are all within
// 10% of their mean (or all zero), or the last second's count is within 10% of
// the second before (waiters that do something every second or so). Waiters
// that subscribe or enqueue first and then go quiet need a moment for that, and
// pollers that started together need a few rounds to spread out. It gives up
// waiting after steadyMax.
func (w *waiterRun) steady(ctx context.Context) error {
	prev, err := w.read(ctx)
	if err != nil {
		return err
	}
	perSecond := int(time.Second / steadyWindow)
	var rates []int64
	same := 0 // samples since the channel count last changed
	for deadline := time.Now().Add(steadyMax); time.Now().Before(deadline); {
		time.Sleep(steadyWindow)
		cur, err := w.read(ctx)
		if err != nil {
			return err
		}
		d := cur.since(prev)
		rates = append(rates, d.client+d.server)
		same++
		if cur.channels != prev.channels {
			same = 0
		}
		prev = cur
		if same >= steadySamples && flat(rates[len(rates)-steadySamples:]) {
			return nil
		}
		if same >= 2*perSecond {
			r := rates[len(rates)-2*perSecond:]
			if flat([]int64{sum(r[:perSecond]), sum(r[perSecond:])}) {
				return nil
			}
		}
	}
	w.e.logf("waiters not steady after %v; measuring anyway", steadyMax)
	return nil
}

func sum(xs []int64) int64 {
	var s int64
	for _, x := range xs {
		s += x
	}
	return s
}

// flat reports whether every x is within 10% of the mean of xs.
func flat(xs []int64) bool {
	total, n := sum(xs), int64(len(xs))
	for _, x := range xs {
		if d := x*n - total; 10*max(d, -d) > total {
			return false
		}
	}
	return true
}

// drain measures the hand-over phase that starts with release: how long all
// waiters take to get the lock (bounded by cfg.cDrain) and the commands spent.
func (w *waiterRun) drain(ctx context.Context, m metrics, release func() error) error {
	r0, err := w.read(ctx)
	if err != nil {
		return err
	}
	t := time.NewTimer(w.e.cfg.cDrain)
	defer t.Stop()
	if err := release(); err != nil {
		return err
	}
	complete := 1.0
	select {
	case <-w.allDone:
	case <-t.C:
		complete = 0
	case <-ctx.Done():
		return ctx.Err()
	}
	used, err := w.usedSince(ctx, r0)
	if err != nil {
		return err
	}
	h := float64(w.acquired.Load())
	m["handoffs"] = h
	m["drain_s"] = used.d.Seconds()
	m["complete"] = complete
	m["handoffs_per_s"] = h / used.d.Seconds()
	m["cmds_per_handoff_client"] = ratio(float64(used.client), h)
	m["cmds_per_handoff_server"] = ratio(float64(used.lockServer()), h)
	return nil
}

// runQueue is scenario c1: n waiters on one held key; after they settle the holder
// releases and the lock passes through all of them, each running one counter
// increment.
func (e *env) runQueue(ctx context.Context, v variant, n int) (metrics, error) {
	w, err := e.newWaiterRun(v, n)
	if err != nil {
		return nil, err
	}
	defer w.close()
	prefix := e.prefix("c1")
	key := prefix + "lock"
	ctr := newCounter(w.rdb, prefix+"counter")
	holder := w.holders.lk.mutex(key)
	if err := holder.lock(ctx); err != nil {
		return nil, fmt.Errorf("holder: %w", err)
	}
	released := false
	defer func() {
		if !released {
			_ = holder.unlock(context.WithoutCancel(ctx))
		}
	}()
	base := liveBytes()
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	for i := range w.n {
		id := int64(i)
		w.wait(runCtx, &wg, w.lk.mutex(key), func() error { return ctr.increment(ctx, id) })
	}
	m, err := w.settle(ctx, base)
	if err != nil {
		return nil, err
	}
	err = w.drain(ctx, m, func() error { released = true; return holder.unlock(ctx) })
	if err != nil {
		return nil, err
	}
	stop()
	wg.Wait()
	lost, err := ctr.lost(ctx, e.admin)
	if err != nil {
		return nil, err
	}
	m["lost"] = float64(lost)
	m["overlaps"] = float64(ctr.overlaps.Load())
	m["errors"] = float64(w.errs.Load())
	return m, nil
}

// runManyKeys is scenario c2: n keys, each held, each with one waiter; after the
// waiters settle all holders release and every waiter takes and releases its key.
func (e *env) runManyKeys(ctx context.Context, v variant, n int) (metrics, error) {
	w, err := e.newWaiterRun(v, n)
	if err != nil {
		return nil, err
	}
	defer w.close()
	prefix := e.prefix("c2")
	keys := make([]string, w.n)
	holders := make([]mutex, w.n)
	for i := range keys {
		keys[i] = prefix + strconv.Itoa(i)
		holders[i] = w.holders.lk.mutex(keys[i])
	}
	held := make([]bool, w.n)
	defer func() { // release whatever is still held when the run fails
		_ = parallel(w.n, func(i int) error {
			if held[i] {
				return holders[i].unlock(context.WithoutCancel(ctx))
			}
			return nil
		})
	}()
	if err := parallel(w.n, func(i int) error {
		if err := holders[i].lock(ctx); err != nil {
			return fmt.Errorf("holder %d: %w", i, err)
		}
		held[i] = true
		return nil
	}); err != nil {
		return nil, err
	}
	base := liveBytes()
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	for _, k := range keys {
		w.wait(runCtx, &wg, w.lk.mutex(k), nil)
	}
	m, err := w.settle(ctx, base)
	if err != nil {
		return nil, err
	}
	err = w.drain(ctx, m, func() error {
		return parallel(w.n, func(i int) error {
			held[i] = false
			return holders[i].unlock(ctx)
		})
	})
	if err != nil {
		return nil, err
	}
	stop()
	wg.Wait()
	m["errors"] = float64(w.errs.Load())
	return m, nil
}

// parallel runs f(0..n-1) on setupWorkers goroutines and returns the first error.
func parallel(n int, f func(i int) error) error {
	var next atomic.Int64
	errs := make([]error, setupWorkers)
	var wg sync.WaitGroup
	for w := range setupWorkers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := f(i); err != nil && errs[w] == nil {
					errs[w] = err
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func tableWaiters(out io.Writer, scenario string, n int, ms []measurement) {
	title := fmt.Sprintf("c1. %d waiters on one key, then the lock passes through all of them (medians)", n)
	if scenario == "c2" {
		title = fmt.Sprintf("c2. %d keys, each held with one waiter, then every holder releases (medians)", n)
	}
	table(out, title, ms, []column{
		{"waiters", "waiters", "%.0f"},
		{"idle cmds/s client", "idle_cmds_per_s_client", "%.0f"},
		{"server", "idle_cmds_per_s_server", "%.0f"},
		{"conns", "conns", "%.0f"},
		{"sub conns", "sub_conns", "%.0f"},
		{"channels", "channels", "%.0f"},
		{"bytes/waiter", "bytes_per_waiter", "%.0f"},
		{"handoffs", "handoffs", "%.0f"},
		{"in s", "drain_s", "%.2f"},
		{"handoffs/s", "handoffs_per_s", "%.0f"},
		{"cmds/handoff client", "cmds_per_handoff_client", "%.2f"},
		{"server", "cmds_per_handoff_server", "%.2f"},
		{"lost", "lost", "%.0f"},
		{"overlaps", "overlaps", "%.0f"},
		{"errors", "errors", "%.0f"},
	})
}
