package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// Scenario p: the primitives beyond the mutex under contention, each goroutine
// with a Client (and go-redis client) of its own, as separate processes would
// be. Holders that exclude everybody (a mutex holder, a writer) increment the
// shared counter with GET + SET; shared holders (semaphore permits, readers)
// read it. The mutex runs too, as the baseline.

// permits is the semaphore size of scenario p.
const permits = 4

// writerEvery makes every writerEvery-th goroutine of the read-write lock a
// writer, the others readers.
const writerEvery = 4

// holders is a lock kind of scenario p opened on one go-redis client.
type holders interface {
	// holder returns goroutine i's handle on key, and whether it excludes every
	// other holder.
	holder(key string, i int) (m mutex, exclusive bool)
	// limit is the most shared holders allowed at once (0: no limit).
	limit() int
}

// primitiveVariants are the variants of scenario p beyond the baselines.
var primitiveVariants = []variant{
	{name: "dlock/sem4", lib: "dlock", in: inP,
		desc: fmt.Sprintf("redislock.NewSemaphore(rdb, %d): every goroutine takes a permit and reads the counter", permits),
		prim: func(rdb *redis.Client) (holders, error) {
			c, err := redislock.NewSemaphore(rdb, permits)
			if err != nil {
				return nil, err
			}
			return semHolders{dlockLocker{c: c}}, nil
		}},
	{name: "dlock/rw", lib: "dlock", in: inP,
		desc: fmt.Sprintf("redislock.NewRWMutex(rdb): one goroutine in %d writes (GET+SET), the others read (GET)", writerEvery),
		prim: func(rdb *redis.Client) (holders, error) {
			m, err := redislock.NewRWMutex(rdb)
			if err != nil {
				return nil, err
			}
			return rwHolders{w: dlockLocker{c: m.Client}, r: dlockLocker{c: m.RLocker()}}, nil
		}},
}

type semHolders struct{ l dlockLocker }

func (s semHolders) holder(key string, _ int) (mutex, bool) { return s.l.mutex(key), false }
func (semHolders) limit() int                               { return permits }

type rwHolders struct{ w, r dlockLocker }

func (h rwHolders) holder(key string, i int) (mutex, bool) {
	if i%writerEvery == 0 {
		return h.w.mutex(key), true
	}
	return h.r.mutex(key), false
}
func (rwHolders) limit() int { return 0 }

// exclusiveHolders runs a mutex variant in scenario p.
type exclusiveHolders struct{ l locker }

func (e exclusiveHolders) holder(key string, _ int) (mutex, bool) { return e.l.mutex(key), true }
func (exclusiveHolders) limit() int                               { return 1 }

// runPrimitives is scenario p: g goroutines, each with its own Client, contending for one
// key of the variant's lock kind for the contended duration.
func (e *env) runPrimitives(ctx context.Context, v variant, g int) (metrics, error) {
	prefix := e.prefix("p")
	key := prefix + "lock"
	cnt := &cmdCounter{}
	hs := make([]holders, g)
	for i := range hs {
		rdb := redis.NewClient(&redis.Options{Addr: e.addr, ClientName: "bench"})
		rdb.AddHook(cnt)
		defer rdb.Close()
		var err error
		if v.prim != nil {
			hs[i], err = v.prim(rdb)
		} else {
			var lk locker
			lk, err = v.open(opening{e: e, rdb: rdb, cnt: cnt})
			hs[i] = exclusiveHolders{lk}
		}
		if err != nil {
			return nil, err
		}
	}
	work := redis.NewClient(&redis.Options{Addr: e.addr, ClientName: "bench"})
	work.AddHook(cnt)
	defer work.Close()
	ctr := newCounter(work, prefix+"counter")
	ms := &measured{e: e, rdb: work, cnt: cnt}
	r0, err := ms.read(ctx)
	if err != nil {
		return nil, err
	}
	runCtx, stop := context.WithTimeout(ctx, e.cfg.bDur)
	defer stop()
	var shared, most, overlaps, timeouts, errs atomic.Int64
	per := make([]int64, g)
	waits := make([][]time.Duration, g)
	excl := make([]bool, g)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range g {
		m, exclusive := hs[i].holder(key, i)
		excl[i] = exclusive
		wg.Go(func() {
			for !over(runCtx) {
				t0 := time.Now()
				if !e.lockWithin(runCtx, m, &timeouts, &errs) {
					continue
				}
				waits[i] = append(waits[i], time.Since(t0))
				var err error
				if exclusive {
					err = ctr.increment(ctx, int64(i))
				} else {
					n := shared.Add(1)
					if lim := int64(hs[i].limit()); (lim > 0 && n > lim) || ctr.inside.Load() > 0 {
						overlaps.Add(1)
					}
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					err = ctr.rdb.Get(workContext(ctx), ctr.key).Err()
					if errors.Is(err, redis.Nil) {
						err = nil
					}
					shared.Add(-1)
				}
				if err != nil {
					errs.Add(1)
				} else {
					per[i]++
				}
				if err := m.unlock(ctx); err != nil {
					errs.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	used, err := ms.usedSince(ctx, r0)
	if err != nil {
		return nil, err
	}
	lost, err := ctr.lost(ctx, e.admin)
	if err != nil {
		return nil, err
	}
	var ops int64
	var exclOps []int64
	var exclWaits [][]time.Duration
	for i, n := range per {
		ops += n
		if excl[i] {
			exclOps = append(exclOps, n)
			exclWaits = append(exclWaits, waits[i])
		}
	}
	w := slices.Concat(waits...)
	slices.Sort(w)
	ew := slices.Concat(exclWaits...)
	slices.Sort(ew)
	n := float64(ops)
	jainExcl := math.NaN() // no exclusive holder
	if len(exclOps) > 0 {
		jainExcl = jain(exclOps)
	}
	return metrics{
		"ops":                n,
		"ops_per_s":          n / elapsed.Seconds(),
		"wait_p50_ms":        millis(percentile(w, 0.50)),
		"wait_p99_ms":        millis(percentile(w, 0.99)),
		"wait_max_ms":        millis(percentile(w, 1)),
		"excl_wait_max_ms":   millis(percentile(ew, 1)),
		"timeouts":           float64(timeouts.Load()),
		"jain":               jain(per),
		"jain_excl":          jainExcl,
		"most_shared":        float64(most.Load()),
		"lost":               float64(lost),
		"overlaps":           float64(overlaps.Load() + ctr.overlaps.Load()),
		"cmds_per_op_client": ratio(float64(used.client), n),
		"cmds_per_op_server": ratio(float64(used.lockServer()), n),
		"errors":             float64(errs.Load()),
	}, nil
}

func tablePrimitives(out io.Writer, g int, ms []measurement) {
	table(out, fmt.Sprintf("p. primitives, one key, G = %d goroutines with a Client each (medians; excl = mutex holders and writers)", g), ms, []column{
		{"ops/s", "ops_per_s", "%.0f"},
		{"wait p50 ms", "wait_p50_ms", "%.2f"},
		{"p99 ms", "wait_p99_ms", "%.1f"},
		{"max ms", "wait_max_ms", "%.1f"},
		{"excl max ms", "excl_wait_max_ms", "%.1f"},
		{"timed out", "timeouts", "%.0f"},
		{"Jain", "jain", "%.2f"},
		{"Jain excl", "jain_excl", "%.2f"},
		{"most shared", "most_shared", "%.0f"},
		{"lost", "lost", "%.0f"},
		{"overlaps", "overlaps", "%.0f"},
		{"cmds/op client", "cmds_per_op_client", "%.2f"},
		{"server", "cmds_per_op_server", "%.2f"},
		{"errors", "errors", "%.0f"},
	})
}
