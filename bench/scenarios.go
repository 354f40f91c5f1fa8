package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// errorPause slows a goroutine down after an unexpected error so that a broken
// run cannot spin.
const errorPause = 10 * time.Millisecond

// steadyMax bounds the wait for scenario c's waiters to reach a steady state.
const steadyMax = 10 * time.Second

// setupWorkers is the parallelism of scenario set-up and tear-down loops.
const setupWorkers = 16

// runA is scenario a: g goroutines, each locking and unlocking its own key as fast
// as it can for the configured duration.
func (e *env) runA(ctx context.Context, v variant, g int) (metrics, error) {
	rdb, cnt := e.newClient("bench")
	defer rdb.Close()
	lk, err := v.open(rdb)
	if err != nil {
		return nil, err
	}
	prefix := e.prefix("a")
	srv0, err := serverCalls(ctx, e.admin)
	if err != nil {
		return nil, err
	}
	lock0 := cnt.lock.Load()
	lat := make([][]time.Duration, g)
	var errs atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(e.cfg.aDur)
	for i := range g {
		m := lk.mutex(prefix + strconv.Itoa(i))
		wg.Go(func() {
			samples := make([]time.Duration, 0, 1<<14)
			for ctx.Err() == nil {
				t0 := time.Now()
				if !t0.Before(end) {
					break
				}
				if err := m.lock(ctx); err != nil {
					errs.Add(1)
					time.Sleep(errorPause)
					continue
				}
				if err := m.unlock(ctx); err != nil {
					errs.Add(1)
				}
				samples = append(samples, time.Since(t0))
			}
			lat[i] = samples
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	srv1, err := serverCalls(ctx, e.admin)
	if err != nil {
		return nil, err
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	n := float64(len(all))
	return metrics{
		"cycles":                float64(len(all)),
		"cycles_per_s":          n / elapsed.Seconds(),
		"lat_p50_us":            micros(percentile(all, 0.50)),
		"lat_p99_us":            micros(percentile(all, 0.99)),
		"cmds_per_cycle_client": ratio(float64(cnt.lock.Load()-lock0), n),
		"cmds_per_cycle_server": ratio(float64(srv1-srv0), n),
		"errors":                float64(errs.Load()),
	}, nil
}

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

// runB is scenario b: g goroutines contending for one key, each critical section
// one increment of a shared counter, for the configured duration. Each acquire
// waits at most cfg.wait; waits cut short by the end of the run are not counted.
func (e *env) runB(ctx context.Context, v variant, g int) (metrics, error) {
	rdb, cnt := e.newClient("bench")
	defer rdb.Close()
	lk, err := v.open(rdb)
	if err != nil {
		return nil, err
	}
	prefix := e.prefix("b")
	key := prefix + "lock"
	ctr := newCounter(rdb, prefix+"counter")
	srv0, err := serverCalls(ctx, e.admin)
	if err != nil {
		return nil, err
	}
	lock0, work0 := cnt.lock.Load(), cnt.work.Load()

	runCtx, stop := context.WithTimeout(ctx, e.cfg.bDur)
	defer stop()
	per := make([]int64, g)
	waits := make([][]time.Duration, g)
	works := make([][]time.Duration, g)
	var timeouts, errs, unlockErrs atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i := range g {
		m := lk.mutex(key)
		wg.Go(func() {
			for runCtx.Err() == nil {
				t0 := time.Now()
				wctx, cancel := context.WithTimeout(runCtx, e.cfg.wait)
				err := m.lock(wctx)
				cancel()
				if err != nil {
					switch {
					case runCtx.Err() != nil: // the run ended during the wait
					case errors.Is(err, errNotObtained) || wctx.Err() != nil:
						timeouts.Add(1)
					default:
						errs.Add(1)
						time.Sleep(errorPause)
					}
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
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	srv1, err := serverCalls(ctx, e.admin)
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
	work := cnt.work.Load() - work0
	n := float64(cs)
	return metrics{
		"cs":                 n,
		"cs_per_s":           n / elapsed.Seconds(),
		"handoffs":           float64(ctr.handoffs.Load()),
		"handoffs_per_s":     float64(ctr.handoffs.Load()) / elapsed.Seconds(),
		"handoff_pct":        100 * ratio(float64(ctr.handoffs.Load()), n),
		"wait_p50_ms":        millis(percentile(w, 0.50)),
		"wait_p99_ms":        millis(percentile(w, 0.99)),
		"wait_max_ms":        millis(percentile(w, 1)),
		"cs_p50_us":          micros(csTime),
		"wait_max_per_g_cs":  ratio(float64(percentile(w, 1)), float64(g)*float64(csTime)),
		"timeouts":           float64(timeouts.Load()),
		"jain":               jain(per),
		"lost":               float64(lost),
		"overlaps":           float64(ctr.overlaps.Load()),
		"cmds_per_cs_client": ratio(float64(cnt.lock.Load()-lock0), n),
		"cmds_per_cs_server": ratio(float64(srv1-srv0-work), n),
		"errors":             float64(errs.Load()),
		"unlock_errors":      float64(unlockErrs.Load()),
	}, nil
}

// Client names of scenario c: the waiters' client is the one measured; the
// holders lock through a client of their own.
const (
	waitersName = "bench-waiters"
	holdersName = "bench-holders"
)

// waiterRun is the shared bookkeeping of scenario c.
type waiterRun struct {
	e        *env
	rdb      *redis.Client // the waiters'
	cnt      *cmdCounter
	lk       locker
	hrdb     *redis.Client // the holders'
	hlk      locker
	n        int // waiters
	started  atomic.Int64
	acquired atomic.Int64
	errs     atomic.Int64
	allDone  chan struct{}
}

func (e *env) newWaiterRun(v variant, n int) (*waiterRun, error) {
	rdb, cnt := e.newClient(waitersName)
	hrdb, _ := e.newClient(holdersName)
	w := &waiterRun{e: e, rdb: rdb, cnt: cnt, hrdb: hrdb, allDone: make(chan struct{})}
	var err error
	if w.lk, err = v.open(rdb); err == nil {
		w.hlk, err = v.open(hrdb)
	}
	if err != nil {
		w.close()
		return nil, err
	}
	if !w.lk.notified() && n > e.cfg.cPollCap {
		n = e.cfg.cPollCap
	}
	w.n = n
	return w, nil
}

func (w *waiterRun) close() {
	w.rdb.Close()
	w.hrdb.Close()
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

// snapshot is a point in time of the command counters.
type snapshot struct {
	at       time.Time
	client   int64 // the waiters' client's lock commands
	server   int64 // non-administrative server commands
	channels int64 // subscribed pub/sub channels
}

func (w *waiterRun) snap(ctx context.Context) (snapshot, error) {
	s, err := serverCalls(ctx, w.e.admin)
	if err != nil {
		return snapshot{}, err
	}
	c, err := channels(ctx, w.e.admin)
	return snapshot{at: time.Now(), client: w.cnt.lock.Load(), server: s, channels: c}, err
}

// settle lets the started waiters reach their steady state and measures what
// they cost meanwhile: commands per second while nobody releases, memory,
// connections and pub/sub channels. base is the live memory before the waiters.
func (w *waiterRun) settle(ctx context.Context, base int64, work func() int64) (metrics, error) {
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
	s0, err := w.snap(ctx)
	if err != nil {
		return nil, err
	}
	w0 := work()
	time.Sleep(w.e.cfg.cSettle)
	s1, err := w.snap(ctx)
	if err != nil {
		return nil, err
	}
	mem := liveBytes() - base
	cs, err := clientConns(ctx, w.e.admin, waitersName)
	if err != nil {
		return nil, err
	}
	d := s1.at.Sub(s0.at).Seconds()
	return metrics{
		"waiters":                float64(w.n),
		"idle_cmds_per_s_client": float64(s1.client-s0.client) / d,
		"idle_cmds_per_s_server": float64(s1.server-s0.server-(work()-w0)) / d,
		"bytes_per_waiter":       float64(mem) / float64(w.n),
		"conns":                  float64(cs.total),
		"sub_conns":              float64(cs.sub),
		"channels":               float64(s1.channels),
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
	prev, err := w.snap(ctx)
	if err != nil {
		return err
	}
	perSecond := int(time.Second / steadyWindow)
	var rates []int64
	same := 0 // samples since the channel count last changed
	for deadline := time.Now().Add(steadyMax); time.Now().Before(deadline); {
		time.Sleep(steadyWindow)
		cur, err := w.snap(ctx)
		if err != nil {
			return err
		}
		rates = append(rates, cur.client-prev.client+cur.server-prev.server)
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
func (w *waiterRun) drain(ctx context.Context, m metrics, release func() error, work func() int64) error {
	s0, err := w.snap(ctx)
	if err != nil {
		return err
	}
	w0 := work()
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
	s1, err := w.snap(ctx)
	if err != nil {
		return err
	}
	h := float64(w.acquired.Load())
	d := s1.at.Sub(s0.at).Seconds()
	m["handoffs"] = h
	m["drain_s"] = d
	m["complete"] = complete
	m["handoffs_per_s"] = h / d
	m["cmds_per_handoff_client"] = ratio(float64(s1.client-s0.client), h)
	m["cmds_per_handoff_server"] = ratio(float64(s1.server-s0.server-(work()-w0)), h)
	return nil
}

// runC1 is scenario c1: n waiters on one held key; after they settle the holder
// releases and the lock passes through all of them, each running one counter
// increment.
func (e *env) runC1(ctx context.Context, v variant, n int) (metrics, error) {
	w, err := e.newWaiterRun(v, n)
	if err != nil {
		return nil, err
	}
	defer w.close()
	prefix := e.prefix("c1")
	key := prefix + "lock"
	ctr := newCounter(w.rdb, prefix+"counter")
	holder := w.hlk.mutex(key)
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
	work := w.cnt.work.Load
	m, err := w.settle(ctx, base, work)
	if err != nil {
		return nil, err
	}
	err = w.drain(ctx, m, func() error { released = true; return holder.unlock(ctx) }, work)
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

// runC2 is scenario c2: n keys, each held, each with one waiter; after the
// waiters settle all holders release and every waiter takes and releases its key.
func (e *env) runC2(ctx context.Context, v variant, n int) (metrics, error) {
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
		holders[i] = w.hlk.mutex(keys[i])
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
	work := w.cnt.work.Load
	m, err := w.settle(ctx, base, work)
	if err != nil {
		return nil, err
	}
	err = w.drain(ctx, m, func() error {
		return parallel(w.n, func(i int) error {
			held[i] = false
			return holders[i].unlock(ctx)
		})
	}, work)
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
