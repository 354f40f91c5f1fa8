package dlockcron_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockcron"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/memlock"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"
)

var srv *testserver.Redis

func TestMain(m *testing.M) {
	os.Exit(testserver.Main(m, func(r *testserver.Redis) { srv = r }))
}

func newRedisClient(t *testing.T) *redislock.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := redislock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// every fires at start, start+period, ... : a cron schedule on an instance
// whose clock is offset from the others by start's difference.
type every struct {
	start  time.Time
	period time.Duration
}

func (e every) Next(t time.Time) time.Time {
	if t.Before(e.start) {
		return e.start
	}
	return e.start.Add((t.Sub(e.start)/e.period + 1) * e.period)
}

// startCron starts a cron instance with one job, scheduled by sched and wrapped
// by l.SkipIfLocked(key); the cron is stopped (its running jobs awaited) and l
// closed when the test ends.
func startCron(t *testing.T, l *dlockcron.Locker, key string, sched cron.Schedule, job cron.Job) {
	t.Helper()
	w, err := l.SkipIfLocked(key)
	if err != nil {
		t.Fatal(err)
	}
	c := cron.New()
	c.Schedule(sched, cron.NewChain(w).Then(job))
	c.Start()
	t.Cleanup(func() {
		<-c.Stop().Done()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := l.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
}

func newLocker(t *testing.T, dl dlock.Locker, opts ...dlockcron.Option) *dlockcron.Locker {
	t.Helper()
	l, err := dlockcron.New(dl, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Two cron instances, clocks 60ms apart, each with its own connection to
// redis-server: every tick of a fast job runs once, with a min-hold longer than
// the splay; without one, the late instance runs every tick again.
func TestTwoCronsOneRunPerTick(t *testing.T) {
	const (
		period = 800 * time.Millisecond
		splay  = 60 * time.Millisecond
		ticks  = 4
	)
	for _, tc := range []struct {
		name    string
		minHold time.Duration
	}{{"min-hold", 400 * time.Millisecond}, {"no min-hold", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			base := time.Now().Add(300 * time.Millisecond)
			var mu sync.Mutex
			runs := map[int]int{}
			after := make(chan struct{}) // a run after the ticks checked
			var once sync.Once
			for i := range 2 {
				l := newLocker(t, newRedisClient(t), dlockcron.WithMinHold(tc.minHold))
				startCron(t, l, t.Name(), every{base.Add(time.Duration(i) * splay), period}, cron.FuncJob(func() {
					k := int(time.Since(base) / period)
					mu.Lock()
					runs[k]++
					mu.Unlock()
					if k >= ticks {
						once.Do(func() { close(after) })
					}
				}))
			}
			select {
			case <-after:
			case <-time.After(time.Duration(ticks+4)*period + 10*time.Second):
				t.Fatal("the schedules did not run")
			}
			mu.Lock()
			defer mu.Unlock()
			got, total := make([]int, ticks), 0
			for k := range got {
				got[k] = runs[k]
				total += runs[k]
				if tc.minHold > 0 && runs[k] != 1 {
					t.Errorf("tick %d ran %d times, want once", k, runs[k])
				}
			}
			t.Logf("runs by tick: %v", got)
			if tc.minHold == 0 && total <= ticks {
				t.Errorf("%d runs in %d ticks without min-hold: the late instance was expected to run ticks again", total, ticks)
			}
		})
	}
}

// A job that runs longer than its period and than its lease's TTL: the lease
// is renewed while it runs, and no instance (neither the other nor the same one
// at its next tick) starts it again until it ends.
func TestSkipWhileRunningElsewhere(t *testing.T) {
	const period = 200 * time.Millisecond
	var mu sync.Mutex
	active, maxActive, ended := 0, 0, 0
	done := make(chan struct{})
	job := cron.FuncJob(func() {
		mu.Lock()
		active++
		maxActive = max(maxActive, active)
		mu.Unlock()
		time.Sleep(700 * time.Millisecond) // the job's own work: longer than 3 periods and 2 TTLs
		mu.Lock()
		defer mu.Unlock()
		active--
		if ended++; ended == 3 {
			close(done)
		}
	})
	base := time.Now().Add(200 * time.Millisecond)
	ttl := dlockcron.WithLockOptions(dlock.WithTTL(300*time.Millisecond), dlock.WithAutoRenew(true))
	for i := range 2 {
		startCron(t, newLocker(t, newRedisClient(t), ttl), t.Name(), every{base.Add(time.Duration(i) * 50 * time.Millisecond), period}, job)
	}
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("three runs did not end within 20s")
	}
	mu.Lock()
	defer mu.Unlock()
	if maxActive != 1 {
		t.Fatalf("%d runs at once, want 1", maxActive)
	}
}

// A ContextJob runs under its lease's context: a lease taken away in the store
// ends it with cause ErrLockLost.
func TestContextJobStoppedOnLoss(t *testing.T) {
	store := memlock.NewStore()
	c, _ := memlock.New(store)
	l := newLocker(t, c, dlockcron.WithLockOptions(dlock.WithTTL(100*time.Millisecond), dlock.WithAutoRenew(true)))
	started := make(chan struct{})
	stopped := make(chan error, 1)
	var once sync.Once
	startCron(t, l, "sync", every{time.Now().Add(50 * time.Millisecond), time.Hour}, dlockcron.ContextFunc(func(ctx context.Context) {
		once.Do(func() { close(started) })
		<-ctx.Done()
		stopped <- context.Cause(ctx)
	}))
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("job did not start")
	}
	if l.Lease("sync") == nil {
		t.Fatal("no lease while the job runs")
	}
	if _, err := store.ForceUnlock(context.Background(), "sync"); err != nil {
		t.Fatal(err)
	}
	select {
	case cause := <-stopped:
		if !errors.Is(cause, dlock.ErrLockLost) {
			t.Fatalf("job context ended with %v, want ErrLockLost", cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("job not stopped after its lease was lost")
	}
}

// A job that panics releases its lock (cron.Recover outside SkipIfLocked).
func TestPanickingJobReleases(t *testing.T) {
	store := memlock.NewStore()
	c, _ := memlock.New(store)
	l := newLocker(t, c)
	w, err := l.SkipIfLocked("p")
	if err != nil {
		t.Fatal(err)
	}
	job := cron.NewChain(cron.Recover(cron.DiscardLogger), w).Then(cron.FuncJob(func() { panic("boom") }))
	job.Run()
	if info, _ := store.Inspect(context.Background(), "p"); info.Held {
		t.Fatal("the lock of a job that panicked is still held")
	}
}

func TestInvalid(t *testing.T) {
	if _, err := dlockcron.New(nil); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("nil locker: %v", err)
	}
	c, _ := memlock.New(memlock.NewStore())
	for _, o := range []dlockcron.Option{dlockcron.WithMinHold(-1), dlockcron.WithLogger(nil)} {
		if _, err := dlockcron.New(c, o); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("bad option: %v", err)
		}
	}
	l := newLocker(t, c)
	if _, err := l.SkipIfLocked("a{b}"); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("bad key: %v", err)
	}
}
