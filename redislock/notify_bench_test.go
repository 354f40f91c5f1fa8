package redislock_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/redislock"
)

// BenchmarkContended runs b.N critical sections on one key from 16 goroutines
// spread over 1 or 4 Clients (separate connection pools and subscriptions, as
// separate processes would have; default options), and reports the lock commands
// per critical section, the hand-overs (the lock passing to another goroutine)
// per second, and the longest wait.
func BenchmarkContended(b *testing.B) {
	for _, kind := range []struct {
		name    string
		fair    bool
		clients int
	}{{"plain/clients=1", false, 1}, {"fair/clients=1", true, 1}, {"plain/clients=4", false, 4}, {"fair/clients=4", true, 4}} {
		b.Run(kind.name, func(b *testing.B) {
			const goroutines = 16
			var cs []*redislock.Client
			var cnts []*counter
			for i := 0; i < kind.clients; i++ {
				c, cnt := counted(b, kind.fair)
				cs, cnts = append(cs, c), append(cnts, cnt)
			}
			commands := func() (n int64) {
				for _, c := range cnts {
					n += c.n.Load()
				}
				return n
			}
			key := dlocktest.Key(b)
			ctx := context.Background()
			var left atomic.Int64
			left.Store(int64(b.N))
			var last, handoffs, worst atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start, before := time.Now(), commands()
			for g := int64(1); g <= goroutines; g++ {
				wg.Add(1)
				c := cs[int(g)%len(cs)]
				go func() {
					defer wg.Done()
					for left.Add(-1) >= 0 {
						t0 := time.Now()
						l, err := c.Lock(ctx, key)
						if err != nil {
							b.Error(err)
							return
						}
						w := int64(time.Since(t0))
						for m := worst.Load(); w > m && !worst.CompareAndSwap(m, w); m = worst.Load() {
						}
						if last.Swap(g) != g {
							handoffs.Add(1)
						}
						if err := l.Unlock(ctx); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			el := time.Since(start)
			b.ReportMetric(float64(commands()-before)/float64(b.N), "cmds/cs")
			b.ReportMetric(float64(worst.Load())/1e6, "maxwait-ms")
			b.ReportMetric(float64(handoffs.Load())/el.Seconds(), "handoffs/s")
			b.ReportMetric(float64(b.N)/el.Seconds(), "cs/s")
		})
	}
}

// BenchmarkUncontendedCommands is one Lock + Unlock of a free key, reporting the
// commands it takes.
func BenchmarkUncontendedCommands(b *testing.B) {
	for _, fair := range []bool{false, true} {
		name := "plain"
		if fair {
			name = "fair"
		}
		b.Run(name, func(b *testing.B) {
			c, cnt := counted(b, fair, dlock.WithTTL(10*time.Second))
			key := dlocktest.Key(b)
			ctx := context.Background()
			before := cnt.n.Load()
			for b.Loop() {
				l, err := c.Lock(ctx, key)
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cnt.n.Load()-before)/float64(b.N), "cmds/cycle")
		})
	}
}
