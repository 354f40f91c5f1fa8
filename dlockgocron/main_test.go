package dlockgocron_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockgocron"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/memlock"
	"github.com/dlock-go/dlock/redislock"
	"github.com/go-co-op/gocron/v2"
	"github.com/redis/go-redis/v9"
)

var srv *testserver.Redis

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	os.Exit(testserver.Main(m, func(r *testserver.Redis) { srv = r }))
}

// backend makes one dlock.Locker per scheduler over one shared store: the
// in-memory store, or the test's redis-server with a go-redis client each.
type backend struct {
	name string
	new  func(t *testing.T) func(t *testing.T) dlock.Locker
}

var backends = []backend{
	{"memlock", func(*testing.T) func(t *testing.T) dlock.Locker {
		store := memlock.NewStore()
		return func(t *testing.T) dlock.Locker {
			c, err := memlock.New(store)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
	}},
	{"redis", func(*testing.T) func(t *testing.T) dlock.Locker {
		return func(t *testing.T) dlock.Locker { return newRedisClient(t, srv.Addr) }
	}},
}

func newRedisClient(t *testing.T, addr string) *redislock.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := redislock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// tickLog records which scheduler ran each tick of a job that fires every
// interval from base (plus each scheduler's clock offset, less than interval).
type tickLog struct {
	base     time.Time
	interval time.Duration
	ticks    int           // the ticks checked
	past     chan struct{} // closed at the first run after the checked ticks

	mu   sync.Mutex
	runs map[int][]int
	at   map[int][]time.Duration // the runs' times into their tick
	once sync.Once
}

func newTickLog(base time.Time, interval time.Duration, ticks int) *tickLog {
	return &tickLog{base: base, interval: interval, ticks: ticks, past: make(chan struct{}), runs: map[int][]int{}, at: map[int][]time.Duration{}}
}

func (g *tickLog) record(sched int, at time.Time) {
	k := int(at.Sub(g.base) / g.interval)
	g.mu.Lock()
	g.runs[k] = append(g.runs[k], sched)
	g.at[k] = append(g.at[k], at.Sub(g.base)-time.Duration(k)*g.interval)
	g.mu.Unlock()
	if k >= g.ticks {
		g.once.Do(func() { close(g.past) })
	}
}

// wait returns once a run of a tick after the checked ones was seen: every
// scheduler has then had its turn at each checked tick.
func (g *tickLog) wait(t *testing.T) {
	t.Helper()
	limit := time.Until(g.base) + time.Duration(g.ticks+4)*g.interval + 10*time.Second
	select {
	case <-g.past:
	case <-time.After(limit):
		t.Fatalf("no run after tick %d within %v; runs %v", g.ticks-1, limit, g.snapshot())
	}
}

func (g *tickLog) snapshot() map[int][]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[int][]int, len(g.runs))
	for k, v := range g.runs {
		out[k] = append([]int(nil), v...)
	}
	return out
}

// runsOf returns how many runs ticks 0..ticks-1 had, in order.
func (g *tickLog) runsOf() []int {
	s := g.snapshot()
	n := make([]int, g.ticks)
	for k := range n {
		n[k] = len(s[k])
	}
	return n
}

func (g *tickLog) checkOnePerTick(t *testing.T) {
	t.Helper()
	s := g.snapshot()
	for k := 0; k < g.ticks; k++ {
		if len(s[k]) != 1 {
			g.mu.Lock()
			at := g.at[k]
			g.mu.Unlock()
			t.Errorf("tick %d ran on schedulers %v (at %v into the tick), want exactly one", k, s[k], at)
		}
	}
	t.Logf("runs by tick: %v", g.runsOf())
}

// startScheduler starts a gocron scheduler with opt whose job "report" fires
// every g.interval from g.base+offset and records its runs as scheduler i.
func startScheduler(t *testing.T, g *tickLog, i int, offset time.Duration, opt gocron.SchedulerOption) gocron.Scheduler {
	t.Helper()
	s, err := gocron.NewScheduler(opt)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.NewJob(gocron.DurationJob(g.interval),
		gocron.NewTask(func() { g.record(i, time.Now()) }),
		gocron.WithName("report"),
		gocron.WithStartAt(gocron.WithStartDateTime(g.base.Add(offset))))
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() { _ = s.Shutdown() })
	return s
}

// splay is each scheduler's clock offset: scheduler i fires i*splayStep late.
const splayStep = 40 * time.Millisecond

func closeLocker(t *testing.T, l *dlockgocron.Locker) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := l.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
}
