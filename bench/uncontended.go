package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// errorPause slows a goroutine down after an unexpected error so that a broken
// run cannot spin.
const errorPause = 10 * time.Millisecond

// runUncontended is scenario a: g goroutines, each locking and unlocking its own key as fast
// as it can for the configured duration, through one locker (one of its own
// each, for a variant with clientEach).
func (e *env) runUncontended(ctx context.Context, v variant, g int) (metrics, error) {
	ms, err := e.openMeasured(v, "bench")
	if err != nil {
		return nil, err
	}
	defer ms.close()
	lks := make([]locker, g)
	defer func() {
		for _, lk := range lks[1:] {
			if lk != nil && v.clientEach {
				closeLocker(lk)
			}
		}
	}()
	lks[0] = ms.lk
	for i := 1; i < g; i++ {
		if !v.clientEach {
			lks[i] = ms.lk
			continue
		}
		if lks[i], err = v.open(ms.opening()); err != nil {
			lks[i] = nil
			return nil, err
		}
	}
	prefix := e.prefix("a")
	// One cycle per key before the counts start: what a key's first use
	// costs (a row inserted, a connection dialled, a script loaded) is not
	// a cycle's, and in a short run it would weigh on the statements per
	// cycle.
	for i := range g {
		m := lks[i].mutex(prefix + strconv.Itoa(i))
		if err := m.lock(ctx); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
		if err := m.unlock(ctx); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
	}
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
	var mem0 runtime.MemStats
	runtime.ReadMemStats(&mem0)
	lat := make([][]time.Duration, g)
	var errs atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(e.cfg.aDur)
	for i := range g {
		m := lks[i].mutex(prefix + strconv.Itoa(i))
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
	var mem1 runtime.MemStats
	runtime.ReadMemStats(&mem1)
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
		// The whole process's allocations, the latency samples' included
		// (amortized: a few bytes per cycle).
		"allocs_per_cycle": ratio(float64(mem1.Mallocs-mem0.Mallocs), n),
		"bytes_per_cycle":  ratio(float64(mem1.TotalAlloc-mem0.TotalAlloc), n),
	}
	m["server_cpu_us_per_cycle"] = ratio(micros(srvCPU1-srvCPU0), n)
	e.readDisk(ctx, v.on).since(disk0).add(m, n, "cycle")
	if cpuOK {
		m["client_cpu_us_per_cycle"] = ratio(micros(cpu1-cpu0), n)
	}
	return m, nil
}

func tableUncontended(out io.Writer, g int, ms []measurement) {
	table(out, fmt.Sprintf("a. uncontended, G = %d goroutines, each on its own key (medians; × raw = median of per-repetition ratios)", g), ms, []column{
		{"cycles/s", "cycles_per_s", "%.0f"},
		{"× raw", "cycles_per_s_vs_raw", "%.2f"},
		{"p50 µs", "lat_p50_us", "%.0f"},
		{"× raw", "lat_p50_us_vs_raw", "%.2f"},
		{"p99 µs", "lat_p99_us", "%.0f"},
		{"× raw", "lat_p99_us_vs_raw", "%.2f"},
		{"cmds/cycle client", "cmds_per_cycle_client", "%.2f"},
		{"server", "cmds_per_cycle_server", "%.2f"},
		{"CPU µs/cycle client", "client_cpu_us_per_cycle", "%.1f"},
		{"server", "server_cpu_us_per_cycle", "%.1f"},
		{"allocs/cycle", "allocs_per_cycle", "%.0f"},
		{"B/cycle", "bytes_per_cycle", "%.0f"},
		{"errors", "errors", "%.0f"},
	})
}
