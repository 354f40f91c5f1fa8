package redlock_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/dlocktest"
)

// BenchmarkLockUnlock is one uncontended lock and unlock cycle over the five
// masters (all on this host). It also reports the client process's CPU time
// (user and system, all its threads) per cycle, which the servers' load on
// the same cores disturbs less than the cycle's wall time.
func BenchmarkLockUnlock(b *testing.B) {
	c := newClient(b)
	ctx := context.Background()
	key := dlocktest.Key(b)
	cpu0 := cpuTime(b)
	for b.Loop() {
		l, err := c.Lock(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
}

// cpuTime is the CPU time the process has used so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
