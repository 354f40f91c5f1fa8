package pglock

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
)

// Benchmarks against the test server (all on one host):
//
//	cd pglock && go test -run '^$' -bench . -benchtime 3s .
//
// Each reports the server's CPU time per operation (all PostgreSQL processes,
// from /proc) next to the wall time.

// serverCPU returns the CPU time used so far by the test server's processes
// (the postmaster and its children), or -1 where /proc cannot tell.
func serverCPU() time.Duration {
	pid := srv.PID()
	if runtime.GOOS != "linux" || pid == 0 {
		return -1
	}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var ticks int64
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 13 || (f[1] != strconv.Itoa(pid) && !strings.HasPrefix(p, "/proc/"+strconv.Itoa(pid)+"/")) {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64) // utime
		k, _ := strconv.ParseInt(f[12], 10, 64) // stime
		ticks += u + k
	}
	return time.Duration(ticks) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}

func reportServerCPU(b *testing.B, before time.Duration) {
	if before < 0 {
		return
	}
	b.ReportMetric(float64((serverCPU()-before).Microseconds())/float64(b.N), "server-µs/op")
}

// BenchmarkLockUnlock: one Client, TryLock and Unlock of one key, uncontended
// (two statements).
func BenchmarkLockUnlock(b *testing.B) {
	c := newClient(b)
	key := dlocktest.Key(b)
	ctx := context.Background()
	cpu := serverCPU()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		l, err := c.TryLock(ctx, key, dlock.WithTTL(10*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportServerCPU(b, cpu)
}

// BenchmarkAdvisoryLockUnlock is the store's own minimum for the same work:
// pg_try_advisory_lock and pg_advisory_unlock on one dedicated connection (no
// TTL, no token, the lock bound to the connection).
func BenchmarkAdvisoryLockUnlock(b *testing.B) {
	ctx := context.Background()
	conn, err := newPool(b).Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	cpu := serverCPU()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var ok bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock(42)").Scan(&ok); err != nil || !ok {
			b.Fatal(ok, err)
		}
		if err := conn.QueryRow(ctx, "SELECT pg_advisory_unlock(42)").Scan(&ok); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
	b.StopTimer()
	reportServerCPU(b, cpu)
}

// BenchmarkHandover: two Clients (pools of their own, as two processes) take
// turns on one key with Lock and Unlock; an op is one acquisition, most of
// them hand-overs woken by the other's NOTIFY.
func BenchmarkHandover(b *testing.B) {
	clients := []*Client{newClient(b), newClient(b)}
	key := dlocktest.Key(b)
	ctx := context.Background()
	cpu := serverCPU()
	b.ResetTimer()
	var wg sync.WaitGroup
	for i, c := range clients {
		n := b.N / 2
		if i == 0 {
			n += b.N % 2
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < n; j++ {
				l, err := c.Lock(ctx, key, dlock.WithTTL(10*time.Second), dlock.WithWait(time.Minute))
				if err != nil {
					b.Error(err)
					return
				}
				if err := l.Unlock(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	reportServerCPU(b, cpu)
}
