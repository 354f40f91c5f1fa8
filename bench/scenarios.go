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

// measured is a variant opened on a fresh go-redis client whose commands are
// counted.
type measured struct {
	e   *env
	v   variant
	rdb *redis.Client
	cnt *cmdCounter
	lk  locker
}

func (e *env) openMeasured(v variant, name string) (*measured, error) {
	rdb, cnt := e.newClient(name)
	m := &measured{e: e, v: v, rdb: rdb, cnt: cnt}
	lk, err := v.open(m.opening())
	if err != nil {
		rdb.Close()
		return nil, err
	}
	m.lk = lk
	return m, nil
}

// opening is what the variant's lockers are opened on: the measured client and
// counter.
func (m *measured) opening() opening { return opening{e: m.e, rdb: m.rdb, cnt: m.cnt} }

func (m *measured) close() {
	closeLocker(m.lk)
	m.rdb.Close()
}

// reading is a point in time of the command counters, or the difference of two.
type reading struct {
	at       time.Time
	d        time.Duration // between the two readings of a difference
	client   int64         // lock commands of the measured client
	work     int64         // critical-section commands of the measured client
	server   int64         // requests of the lock server, work included when it is Redis
	channels int64         // subscribed pub/sub channels
}

func (m *measured) read(ctx context.Context) (reading, error) {
	s, err := m.e.requests(ctx, m.v.on)
	if err != nil {
		return reading{}, err
	}
	if m.v.on != onRedis {
		// The critical section's work goes to Redis: lockServer takes out
		// nothing.
		s += m.cnt.work.Load()
	}
	c, err := channels(ctx, m.e.admin)
	return reading{at: time.Now(), client: m.cnt.lock.Load(), work: m.cnt.work.Load(), server: s, channels: c}, err
}

// since returns the counts from r0 to r.
func (r reading) since(r0 reading) reading {
	return reading{at: r.at, d: r.at.Sub(r0.at), client: r.client - r0.client, work: r.work - r0.work,
		server: r.server - r0.server, channels: r.channels}
}

// usedSince returns the counts from r0 to now, or the context's error if it ended.
func (m *measured) usedSince(ctx context.Context, r0 reading) (reading, error) {
	if err := ctx.Err(); err != nil {
		return reading{}, err
	}
	r1, err := m.read(ctx)
	return r1.since(r0), err
}

// lockServer is the lock server's count of lock requests (work taken out).
func (r reading) lockServer() int64 { return r.server - r.work }

// runA is scenario a: g goroutines, each locking and unlocking its own key as fast
// as it can for the configured duration.
func (e *env) runA(ctx context.Context, v variant, g int) (metrics, error) {
	ms, err := e.openMeasured(v, "bench")
	if err != nil {
		return nil, err
	}
	defer ms.close()
	prefix := e.prefix("a")
	r0, err := ms.read(ctx)
	if err != nil {
		return nil, err
	}
	srvCPU0, err := e.lockServerCPU(ctx, v.on)
	if err != nil {
		return nil, err
	}
	disk0 := e.readDisk(ctx, v.on)
	cpu0, cpuOK := processCPU()
	lat := make([][]time.Duration, g)
	var errs atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(e.cfg.aDur)
	for i := range g {
		m := ms.lk.mutex(prefix + strconv.Itoa(i))
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
	cpu1, _ := processCPU()
	srvCPU1, err := e.lockServerCPU(ctx, v.on)
	if err != nil {
		return nil, err
	}
	used, err := ms.usedSince(ctx, r0)
	if err != nil {
		return nil, err
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	n := float64(len(all))
	m := metrics{
		"cycles":                float64(len(all)),
		"cycles_per_s":          n / elapsed.Seconds(),
		"lat_p50_us":            micros(percentile(all, 0.50)),
		"lat_p99_us":            micros(percentile(all, 0.99)),
		"cmds_per_cycle_client": ratio(float64(used.client), n),
		"cmds_per_cycle_server": ratio(float64(used.lockServer()), n),
		"errors":                float64(errs.Load()),
	}
	m["server_cpu_us_per_cycle"] = ratio(micros(srvCPU1-srvCPU0), n)
	e.readDisk(ctx, v.on).since(disk0).add(m, n, "cycle")
	if cpuOK {
		m["client_cpu_us_per_cycle"] = ratio(micros(cpu1-cpu0), n)
	}
	return m, nil
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
	return e.contended(ctx, v, g, false)
}

// runBC is scenario bc: scenario b with one locker (one dlock Client, one
// subscription, one in-process queue) per goroutine over the shared go-redis
// pool, as G separate processes would be, as far as the lock can tell.
func (e *env) runBC(ctx context.Context, v variant, g int) (metrics, error) {
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
			for runCtx.Err() == nil {
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
		"errors":               float64(errs.Load()),
		"unlock_errors":        float64(unlockErrs.Load()),
	}
	e.readDisk(ctx, v.on).since(disk0).add(m, n, "cs")
	return m, nil
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
	case runCtx.Err() != nil: // the run ended during the wait
	case errors.Is(err, errNotObtained) || wctx.Err() != nil:
		timeouts.Add(1)
	default:
		errs.Add(1)
		time.Sleep(errorPause)
	}
	return false
}

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
