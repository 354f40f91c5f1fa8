package main

// Scenario s: one process holding K locks with renewal. dlock renews every
// lease of a Client from one renewer, in batches (one script call per hundred
// leases, one pipeline per round); the peers run the renew loop a user would
// write: a goroutine per lock calling Extend (redsync) or Refresh (bsm) every
// TTL/3.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/driver"

	bsm "github.com/bsm/redislock"
	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// holder holds many locks with renewal.
type holder interface {
	hold(ctx context.Context, key string) error // takes key and keeps it renewed
	lost() int                                  // locks lost so far
	release(ctx context.Context)                // stops renewing and releases all
}

// scaleVariant is one library holding K locks.
type scaleVariant struct {
	name, desc string
	open       func(rdb *redis.Client, ttl time.Duration) (holder, error)
}

var scaleVariants = []scaleVariant{
	{"dlock", "redislock.New, auto-renewed leases (batched renewal)", func(rdb *redis.Client, ttl time.Duration) (holder, error) {
		c, err := redislock.New(rdb, dlock.WithTTL(ttl), dlock.WithAutoRenew(true))
		return &dlockHolder{c: c}, err
	}},
	{"dlock-1by1", "the same over a driver without ExtendMany: one Extend per lease and renewal", func(rdb *redis.Client, ttl time.Duration) (holder, error) {
		d, err := redislock.NewDriver(rdb)
		if err != nil {
			return nil, err
		}
		c, err := dlock.NewClient(singleExtends{d}, dlock.WithTTL(ttl), dlock.WithAutoRenew(true))
		return &dlockHolder{c: c}, err
	}},
	{"redsync", "redsync Mutex per lock, a goroutine per lock calling Extend every TTL/3", func(rdb *redis.Client, ttl time.Duration) (holder, error) {
		return &loopHolder{ttl: ttl, open: redsyncRenewed(redsync.New(goredis.NewPool(rdb)), ttl)}, nil
	}},
	{"bsm", "bsm Obtain per lock, a goroutine per lock calling Refresh every TTL/3", func(rdb *redis.Client, ttl time.Duration) (holder, error) {
		return &loopHolder{ttl: ttl, open: bsmRenewed(bsm.New(rdb), ttl)}, nil
	}},
}

// singleExtends hides the driver's ExtendMany: the Client extends one lease per
// call.
type singleExtends struct{ d *redislock.Driver }

func (s singleExtends) Acquire(ctx context.Context, r driver.AcquireRequest) (driver.Grant, error) {
	return s.d.Acquire(ctx, r)
}

func (s singleExtends) Info() driver.DriverInfo { return s.d.Info() }

func (s singleExtends) Extend(ctx context.Context, h driver.Holding, ttl time.Duration) (time.Duration, error) {
	return s.d.Extend(ctx, h, ttl)
}

func (s singleExtends) Release(ctx context.Context, h driver.Holding) error {
	return s.d.Release(ctx, h)
}

func (s singleExtends) TTL(ctx context.Context, h driver.Holding) (time.Duration, error) {
	return s.d.TTL(ctx, h)
}

type dlockHolder struct {
	c      *dlock.Client
	mu     sync.Mutex
	leases []*dlock.Lease
}

func (h *dlockHolder) hold(ctx context.Context, key string) error {
	l, err := h.c.TryLock(ctx, key)
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.leases = append(h.leases, l)
	h.mu.Unlock()
	return nil
}

func (h *dlockHolder) lost() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, l := range h.leases {
		if l.Err() != nil {
			n++
		}
	}
	return n
}

func (h *dlockHolder) release(ctx context.Context) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range h.leases {
		_ = l.Unlock(ctx)
	}
	h.leases = nil
}

// renewed is one lock of a peer: its renewal (false when the lock is gone) and
// its release.
type renewed struct {
	extend  func(ctx context.Context) (bool, error)
	release func(ctx context.Context) error
}

func redsyncRenewed(rs *redsync.Redsync, ttl time.Duration) func(ctx context.Context, key string) (renewed, error) {
	return func(ctx context.Context, key string) (renewed, error) {
		m := rs.NewMutex(key, redsync.WithExpiry(ttl), redsync.WithTries(1))
		if err := m.LockContext(ctx); err != nil {
			return renewed{}, err
		}
		return renewed{extend: m.ExtendContext, release: func(ctx context.Context) error {
			_, err := m.UnlockContext(ctx)
			return err
		}}, nil
	}
}

func bsmRenewed(c *bsm.Client, ttl time.Duration) func(ctx context.Context, key string) (renewed, error) {
	return func(ctx context.Context, key string) (renewed, error) {
		l, err := c.Obtain(ctx, key, ttl, nil)
		if err != nil {
			return renewed{}, err
		}
		return renewed{extend: func(ctx context.Context) (bool, error) {
			err := l.Refresh(ctx, ttl, nil)
			if errors.Is(err, bsm.ErrNotObtained) {
				return false, nil
			}
			return err == nil, err
		}, release: l.Release}, nil
	}
}

// loopHolder runs the obvious renew loop: a goroutine per lock, extending it
// every TTL/3 until it is released or the extend says it is gone.
type loopHolder struct {
	ttl    time.Duration
	open   func(ctx context.Context, key string) (renewed, error)
	mu     sync.Mutex
	locks  []renewed
	nlost  atomic.Int64
	stop   context.CancelFunc
	stopCh context.Context
	wg     sync.WaitGroup
}

func (h *loopHolder) hold(ctx context.Context, key string) error {
	h.mu.Lock()
	if h.stop == nil {
		h.stopCh, h.stop = context.WithCancel(context.Background())
	}
	stopCh := h.stopCh
	h.mu.Unlock()
	r, err := h.open(ctx, key)
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.locks = append(h.locks, r)
	h.mu.Unlock()
	h.wg.Go(func() {
		t := time.NewTicker(h.ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-stopCh.Done():
				return
			case <-t.C:
			}
			if ok, err := r.extend(stopCh); !ok && err == nil {
				h.nlost.Add(1)
				return
			}
		}
	})
	return nil
}

func (h *loopHolder) lost() int { return int(h.nlost.Load()) }

func (h *loopHolder) release(ctx context.Context) {
	h.mu.Lock()
	stop, locks := h.stop, h.locks
	h.locks = nil
	h.mu.Unlock()
	if stop != nil {
		stop()
	}
	h.wg.Wait()
	for _, r := range locks {
		_ = r.release(ctx)
	}
}

// tripCounter is a go-redis hook counting round trips: one per command sent
// alone, one per pipeline.
type tripCounter struct{ n atomic.Int64 }

func (c *tripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *tripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *tripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmds)
	}
}

// memory returns the live heap and goroutine stacks after a collection.
func memory() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc + ms.StackInuse
}

// runScaleOnce holds k locks with variant v for a warm-up renewal period and
// one TTL of measurement.
func (e *env) runScaleOnce(ctx context.Context, v scaleVariant, k int) (metrics, error) {
	const workers = 16
	// Every connection the run will use is open before the baselines.
	rdb := redis.NewClient(&redis.Options{Addr: e.addr, ClientName: "bench-s-" + v.name, PoolSize: workers, MinIdleConns: workers})
	defer rdb.Close()
	trips := &tripCounter{}
	rdb.AddHook(trips)
	ttl := e.cfg.sTTL
	h, err := v.open(rdb, ttl)
	if err != nil {
		return nil, err
	}
	defer h.release(context.WithoutCancel(ctx))
	if err := rdb.Ping(ctx).Err(); err != nil {
		return nil, err
	}
	for end := time.Now().Add(5 * time.Second); rdb.PoolStats().TotalConns < workers && time.Now().Before(end); {
		if err := sleepCtx(ctx, 10*time.Millisecond); err != nil {
			return nil, err
		}
	}
	mem0, g0 := memory(), runtime.NumGoroutine()
	used0, err := infoSum(ctx, e.admin, "memory", "used_memory")
	if err != nil {
		return nil, err
	}
	prefix := e.prefix("s")
	var next atomic.Int64
	errs := make(chan error, workers)
	for range workers {
		go func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(k) {
					errs <- nil
					return
				}
				if err := h.hold(ctx, fmt.Sprintf("%s%d", prefix, i)); err != nil {
					next.Store(int64(k))
					errs <- err
					return
				}
			}
		}()
	}
	var herr error
	for range workers {
		herr = errors.Join(herr, <-errs)
	}
	if herr != nil {
		return nil, herr
	}
	used1, err := infoSum(ctx, e.admin, "memory", "used_memory")
	if err != nil {
		return nil, err
	}
	// A renewal period to let every lock be renewed once.
	if err := sleepCtx(ctx, ttl/3); err != nil {
		return nil, err
	}
	mem1, g1 := memory(), runtime.NumGoroutine()
	srv0, err := serverCalls(ctx, e.admin)
	if err != nil {
		return nil, err
	}
	ext0, err := commandCount(ctx, e.admin, "pexpire")
	if err != nil {
		return nil, err
	}
	cpu0, _ := processCPU()
	trips0 := trips.n.Load()
	start := time.Now()
	if err := sleepCtx(ctx, ttl); err != nil {
		return nil, err
	}
	window := time.Since(start)
	cpu1, _ := processCPU()
	trips1 := trips.n.Load()
	ext1, err := commandCount(ctx, e.admin, "pexpire")
	if err != nil {
		return nil, err
	}
	srv1, err := serverCalls(ctx, e.admin)
	if err != nil {
		return nil, err
	}
	// Every variant's renewal is one PEXPIRE: the server's commands per
	// renewal are exact whatever the phase of the renewals in the window (a
	// Client renewing in rounds may fit two or three of them in it), and a
	// lease is renewed three times per TTL.
	renewals := float64(ext1 - ext0)
	perLeaseTTL := float64(k) * window.Seconds() / ttl.Seconds()
	return metrics{
		"renewals_per_lease_window": renewals / float64(k),
		"trips_per_lease_ttl":       float64(trips1-trips0) / perLeaseTTL,
		"cmds_per_lease_ttl":        3 * float64(srv1-srv0) / renewals,
		"cpu_us_per_lease_ttl":      float64((cpu1 - cpu0).Microseconds()) / perLeaseTTL,
		"cpu_pct":                   100 * (cpu1 - cpu0).Seconds() / window.Seconds(),
		"goroutines_per_lease":      float64(g1-g0) / float64(k),
		"heap_per_lease_B":          (float64(mem1) - float64(mem0)) / float64(k),
		"redis_B_per_lock":          (used1 - used0) / float64(k),
		"lost":                      float64(h.lost()),
	}, nil
}

// commandCount returns the calls of one command, from INFO commandstats.
func commandCount(ctx context.Context, admin *redis.Client, name string) (int64, error) {
	s, err := admin.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+name+":calls="); ok {
			v, _, _ = strings.Cut(v, ",")
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// runScale runs scenario s for every K, the variants interleaved within each
// repetition, and prints its table.
func (e *env) runScale(ctx context.Context, out io.Writer) ([]measurement, error) {
	var all []measurement
	for _, k := range e.cfg.sK {
		var runs []measurement
		for rep := 1; rep <= e.cfg.reps; rep++ {
			for i := range scaleVariants {
				v := scaleVariants[(i+rep-1)%len(scaleVariants)]
				if len(e.cfg.only) > 0 && !e.cfg.only[v.name] {
					continue
				}
				if err := e.admin.FlushAll(ctx).Err(); err != nil {
					return all, err
				}
				m, err := e.runScaleOnce(ctx, v, k)
				if err != nil {
					if ctx.Err() != nil {
						return all, ctx.Err()
					}
					e.logf("s k=%d %s rep %d: error: %v", k, v.name, rep, err)
					continue
				}
				r := measurement{Scenario: "s", Kind: "run", Variant: v.name, N: k, Rep: rep, M: m}
				e.emit(r)
				e.logf("s k=%d %-10s rep %d: %.3f trips, %.2f cmds per lease per TTL, %.3f goroutines, %.0f B heap per lease, %.0f B/lock in Redis, lost %.0f",
					k, v.name, rep, m["trips_per_lease_ttl"], m["cmds_per_lease_ttl"], m["goroutines_per_lease"], m["heap_per_lease_B"], m["redis_B_per_lock"], m["lost"])
				runs = append(runs, r)
			}
		}
		meds := medians(runs)
		for _, m := range meds {
			e.emit(m)
		}
		all = append(all, runs...)
		all = append(all, meds...)
		table(out, fmt.Sprintf("s. K = %d locks held with renewal in one process, TTL %v renewed every %v (medians)", k, e.cfg.sTTL, e.cfg.sTTL/3), meds, []column{
			{"renewals/lease in window", "renewals_per_lease_window", "%.2f"},
			{"round trips/lease/TTL", "trips_per_lease_ttl", "%.3f"},
			{"server cmds/lease/TTL (3 × per renewal)", "cmds_per_lease_ttl", "%.2f"},
			{"client CPU µs/lease/TTL", "cpu_us_per_lease_ttl", "%.1f"},
			{"client CPU %", "cpu_pct", "%.1f"},
			{"goroutines/lease", "goroutines_per_lease", "%.3f"},
			{"heap+stack B/lease", "heap_per_lease_B", "%.0f"},
			{"Redis B/lock", "redis_B_per_lock", "%.0f"},
			{"lost", "lost", "%.0f"},
		})
	}
	return all, nil
}
