package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testproxy"
	"github.com/dlock-go/dlock/memlock"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"
)

// Candidates with a Client each run the leader's function in turn: never two
// at once, each term's token above the last, terms spread over the candidates,
// and cancelling the context stops every loop with its error.
func TestRunAsLeaderOneAtATime(t *testing.T) {
	const candidates, terms = 3, 12
	role := dlocktest.Key(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	guard := time.AfterFunc(60*time.Second, cancel)
	defer guard.Stop()
	var inside, total atomic.Int32
	var mu sync.Mutex
	var last uint64
	led := map[int]int{}
	errs := make(chan error, candidates)
	for i := 0; i < candidates; i++ {
		c := newRedisLocker(t)
		go func() {
			errs <- dlock.RunAsLeader(ctx, c, role, func(fctx context.Context) error {
				if n := inside.Add(1); n != 1 {
					t.Errorf("%d leaders' functions run at once", n)
				}
				defer inside.Add(-1)
				lead := dlock.LeadershipFromContext(fctx)
				if lead == nil || lead.Role() != role || lead.Err() != nil {
					t.Errorf("leadership in the function's context: %v", lead)
					return nil
				}
				mu.Lock()
				if lead.Token() <= last {
					t.Errorf("term token %d after %d", lead.Token(), last)
				}
				last = lead.Token()
				led[i]++
				mu.Unlock()
				if total.Add(1) == terms {
					cancel()
				}
				select { // the leader's work
				case <-fctx.Done():
				case <-time.After(20 * time.Millisecond):
				}
				return nil
			}, dlock.WithTTL(time.Second))
		}()
	}
	for i := 0; i < candidates; i++ {
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Errorf("RunAsLeader returned %v, want context.Canceled", err)
		}
	}
	if !guard.Stop() && total.Load() < terms {
		t.Fatalf("only %d terms in 60s", total.Load())
	}
	if len(led) < 2 {
		t.Errorf("terms by candidate %v: the role never changed hands", led)
	}
	if info, err := dlock.CurrentLeader(context.Background(), newRedisLocker(t), role); err != nil || info.Held {
		t.Errorf("after every loop stopped: %+v %v", info, err)
	}
}

// A leader whose store goes away loses its leadership at its local deadline:
// its function's context ends (cause ErrLockLost), its leadership has ended
// before another candidate's function starts, and that candidate takes over
// within the TTL.
func TestRunAsLeaderLossHandsOver(t *testing.T) {
	const ttl = 500 * time.Millisecond
	role := dlocktest.Key(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	guard := time.AfterFunc(60*time.Second, cancel)
	defer guard.Stop()

	proxy := testproxy.Start(t, redisAddr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer rdb.Close()
	cut, err := redislock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	var cutLead atomic.Pointer[dlock.Leadership]
	cutStarted := make(chan struct{})
	cutEnded := make(chan error, 1)
	otherStarted := make(chan time.Time, 1)
	errs := make(chan error, 2)
	go func() {
		errs <- dlock.RunAsLeader(ctx, cut, role, func(fctx context.Context) error {
			if !cutLead.CompareAndSwap(nil, dlock.LeadershipFromContext(fctx)) {
				return nil // a later term, once the proxy is back: none expected
			}
			close(cutStarted)
			<-fctx.Done()
			cutEnded <- context.Cause(fctx)
			return fctx.Err()
		}, dlock.WithTTL(ttl))
	}()
	select {
	case <-cutStarted:
	case <-ctx.Done():
		t.Fatal("the first candidate never led")
	}
	other := newRedisLocker(t)
	go func() {
		errs <- dlock.RunAsLeader(ctx, other, role, func(fctx context.Context) error {
			select {
			case <-cutLead.Load().Done():
			default:
				t.Error("the other candidate leads while the first one's leadership stands")
			}
			otherStarted <- time.Now()
			<-fctx.Done()
			return nil
		}, dlock.WithTTL(ttl))
	}()
	proxy.SetDown(true)
	downAt := time.Now()

	select {
	case cause := <-cutEnded:
		if !errors.Is(cause, dlock.ErrLockLost) {
			t.Errorf("the cut leader's function ended with %v, want ErrLockLost", cause)
		}
	case <-ctx.Done():
		t.Fatal("the cut leader's function never ended")
	}
	select {
	case at := <-otherStarted:
		if took := at.Sub(downAt); took > ttl+time.Second {
			t.Errorf("took over %v after the cut, TTL %v", took, ttl)
		}
	case <-ctx.Done():
		t.Fatal("no take-over")
	}
	cancel()
	for i := 0; i < 2; i++ {
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Errorf("RunAsLeader returned %v", err)
		}
	}
}

// Cancelling the context ends the leader's function and every campaign; the
// role is free at once (resigned, not left to its TTL).
func TestRunAsLeaderCancelStops(t *testing.T) {
	role := dlocktest.Key(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	running := make(chan struct{})
	var g errgroup.Group
	for i := 0; i < 2; i++ {
		c := newRedisLocker(t)
		g.Go(func() error {
			return dlock.RunAsLeader(ctx, c, role, func(fctx context.Context) error {
				close(running) // a second term would panic: there is none
				<-fctx.Done()
				if !errors.Is(context.Cause(fctx), context.Canceled) {
					t.Errorf("function's context ended with %v", context.Cause(fctx))
				}
				return nil
			})
		})
	}
	<-running
	cancel()
	done := make(chan error, 1)
	go func() { done <- g.Wait() }()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("RunAsLeader returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RunAsLeader still running 10s after its context was cancelled")
	}
	if info, err := dlock.CurrentLeader(context.Background(), newRedisLocker(t), role); err != nil || info.Held {
		t.Fatalf("after cancel: %+v %v", info, err)
	}
}

// The function's error is logged and the loop goes on: the next term follows.
// A panic resigns and goes on up the stack.
func TestRunAsLeaderFunctionErrorsAndPanics(t *testing.T) {
	// Logged through the Client's logger.
	rec := &logRecorder{prefix: "dlock: the leader's function failed", seen: make(chan string, 1)}
	store := memlock.NewStore()
	c, err := memlock.New(store, dlock.WithLogger(slog.New(rec)))
	if err != nil {
		t.Fatal(err)
	}
	role := "scheduler"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var n atomic.Int32
	err = dlock.RunAsLeader(ctx, c, role, func(context.Context) error {
		if n.Add(1) == 1 {
			return errors.New("scheduler: start failed")
		}
		cancel()
		return nil
	})
	if !errors.Is(err, context.Canceled) || n.Load() != 2 {
		t.Fatalf("RunAsLeader returned %v after %d terms, want context.Canceled after 2", err, n.Load())
	}
	if lines := rec.lines(); len(lines) != 1 || !strings.Contains(lines[0], "scheduler: start failed") || !strings.Contains(lines[0], "role="+role) {
		t.Errorf("logged %q", lines)
	}

	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v, want the function's panic", r)
			}
		}()
		_ = dlock.RunAsLeader(context.Background(), c, role, func(context.Context) error { panic("boom") })
	}()
	if info, _ := dlock.CurrentLeader(context.Background(), store, role); info.Held {
		t.Errorf("role held after the function panicked: %+v", info)
	}
}

func TestRunAsLeaderBadInput(t *testing.T) {
	ctx := context.Background()
	c, err := memlock.New(memlock.NewStore())
	if err != nil {
		t.Fatal(err)
	}
	fn := func(context.Context) error { t.Error("function ran"); return nil }
	var nilLocker *dlock.Client
	var nilCtx context.Context
	checks := map[string]error{
		"nil locker":       dlock.RunAsLeader(ctx, nil, "r", fn),
		"typed nil locker": dlock.RunAsLeader(ctx, nilLocker, "r", fn),
		"nil function":     dlock.RunAsLeader(ctx, c, "r", nil),
		"nil ctx":          dlock.RunAsLeader(nilCtx, c, "r", fn),
		"bad role":         dlock.RunAsLeader(ctx, c, "{r}", fn),
		"bad option":       dlock.RunAsLeader(ctx, c, "r", fn, dlock.WithTTL(-1)),
		"nil option":       dlock.RunAsLeader(ctx, c, "r", fn, nil),
	}
	for name, err := range checks {
		if !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if l := dlock.LeadershipFromContext(ctx); l != nil {
		t.Errorf("LeadershipFromContext of a plain context: %v", l)
	}
}

// A scheduler that must run once across a fleet runs while its instance leads:
// started in the function, shut down when the leadership ends (lost, or the
// process is stopping), and started again by whichever instance wins next.
func ExampleRunAsLeader() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	locker, err := redislock.New(rdb)
	if err != nil {
		panic(err)
	}
	// A short TTL: a crashed leader's scheduler restarts elsewhere within 5s.
	err = dlock.RunAsLeader(ctx, locker, "scheduler", func(ctx context.Context) error {
		// Start the scheduler here (asynq's Scheduler.Start, say); this one
		// ticks by itself, and stops when the leadership ends (lost, or the
		// process stopping) as a real one would be shut down.
		tick := time.NewTicker(time.Minute)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
				fmt.Println("enqueue the periodic tasks")
			}
		}
	}, dlock.WithTTL(5*time.Second), dlock.WithMetadata("host-a"))
	fmt.Println(err) // context canceled, after Ctrl-C
}
