package faulttest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

// helperEnv selects a child-process mode: the test binary re-executes itself with
// it set, and TestMain runs the helper instead of the tests.
const helperEnv = "DLOCK_FAULT_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(runHelper(mode))
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// mono returns CLOCK_MONOTONIC in nanoseconds: the same clock in every process on
// the host, so timestamps from child processes compare with the parent's.
func mono() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

func ms(ns int64) string { return fmt.Sprintf("%.1fms", float64(ns)/1e6) }

// event is one line a child process reports on its stdout.
type event struct {
	Ev    string `json:"ev"`              // acquired, lost, check, wrote, done, error
	T     int64  `json:"t"`               // mono() when it happened
	Start int64  `json:"start,omitempty"` // mono() before the acquire round trip (acquired)
	Token uint64 `json:"token,omitempty"`
	N     int64  `json:"n,omitempty"`
	Err   string `json:"err,omitempty"`
	Stale bool   `json:"stale,omitempty"` // the error matched dlock.ErrStaleToken
	Lost  bool   `json:"lost,omitempty"`  // the error matched dlock.ErrLockLost
	Done  bool   `json:"done,omitempty"`  // Done was closed when checked
}

// child is a helper process started by the test.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	events chan event
	exited chan struct{}
	seen   []event // read from events but not yet asked for
}

// startChild re-executes the test binary in helper mode with env (KEY=VALUE
// pairs), and kills it when the test ends.
func startChild(t *testing.T, mode string, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), helperEnv+"="+mode), env...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, stdin: stdin, events: make(chan event, 1024), exited: make(chan struct{})}
	go func() {
		defer close(c.exited)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var e event
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				c.events <- e
			}
		}
		_ = cmd.Wait()
		close(c.events)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = stdin.Close()
		<-c.exited
	})
	return c
}

// next returns the child's next event named ev (events of other names stay for
// later calls), or fails the test after timeout or when the child exits first.
func (c *child) next(t *testing.T, ev string, timeout time.Duration) event {
	t.Helper()
	for i, e := range c.seen {
		if e.Ev == ev {
			c.seen = append(c.seen[:i], c.seen[i+1:]...)
			return e
		}
	}
	tm := time.NewTimer(timeout)
	defer tm.Stop()
	for {
		select {
		case e, ok := <-c.events:
			if !ok {
				t.Fatalf("child exited before reporting %q", ev)
			}
			if e.Ev == "error" {
				t.Fatalf("child error: %s", e.Err)
			}
			if e.Ev == ev {
				return e
			}
			c.seen = append(c.seen, e)
		case <-tm.C:
			t.Fatalf("no %q from the child within %v", ev, timeout)
		}
	}
}

func (c *child) send(t *testing.T, cmd string) {
	t.Helper()
	if _, err := fmt.Fprintln(c.stdin, cmd); err != nil {
		t.Fatal(err)
	}
}

func (c *child) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := c.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// reporter writes events as JSON lines, from any goroutine.
type reporter struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (r *reporter) emit(e event) {
	if e.T == 0 {
		e.T = mono()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.enc.Encode(e)
}

func (r *reporter) fail(err error) int {
	r.emit(event{Ev: "error", Err: err.Error()})
	return 1
}

func envInt(name string) int {
	n, _ := strconv.Atoi(os.Getenv(name))
	return n
}

func envMS(name string) time.Duration { return time.Duration(envInt(name)) * time.Millisecond }

// runHelper is the body of a child process.
func runHelper(mode string) int {
	r := &reporter{enc: json.NewEncoder(os.Stdout)}
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("ADDR"), ContextTimeoutEnabled: true, MaxRetries: -1})
	defer rdb.Close()
	switch mode {
	case "hold":
		return helperHold(r, rdb)
	case "hammer":
		return helperHammer(r, rdb)
	}
	return r.fail(fmt.Errorf("unknown helper mode %q", mode))
}

// helperHold takes KEY with TTL (and a watchdog every RENEW if set), reports it,
// reports the loss when Done fires, and obeys commands on stdin: "check" reports
// Err and Done, "write" makes a fenced increment of RESOURCE.
func helperHold(r *reporter, rdb *redis.Client) int {
	ctx := context.Background()
	opts := []dlock.Option{dlock.WithTTL(envMS("TTL")), dlock.WithRetry(dlock.FixedBackoff(5 * time.Millisecond))}
	if every := envMS("RENEW"); every > 0 {
		opts = append(opts, dlock.WithAutoRenew(true), dlock.WithRenewEvery(every))
	}
	locker, err := redislock.New(rdb, opts...)
	if err != nil {
		return r.fail(err)
	}
	fence, _ := redislock.NewFence(rdb)
	start := mono()
	lease, err := locker.Lock(ctx, os.Getenv("KEY"))
	if err != nil {
		return r.fail(err)
	}
	r.emit(event{Ev: "acquired", Start: start, Token: lease.Token()})
	go func() {
		<-lease.Done()
		r.emit(event{Ev: "lost", Err: fmt.Sprint(lease.Err()), Lost: errors.Is(lease.Err(), dlock.ErrLockLost)})
	}()
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch sc.Text() {
		case "check":
			err := lease.Err()
			done := false
			select {
			case <-lease.Done():
				done = true
			default:
			}
			r.emit(event{Ev: "check", Err: fmt.Sprint(err), Lost: errors.Is(err, dlock.ErrLockLost), Done: done})
		case "write":
			n, err := fence.IncrBy(ctx, lease, os.Getenv("RESOURCE"), 1)
			r.emit(event{Ev: "wrote", N: n, Err: fmt.Sprint(err), Stale: errors.Is(err, dlock.ErrStaleToken)})
		}
	}
	_ = lease.Unlock(ctx)
	return 0
}

// helperHammer runs GOROUTINES goroutines that each take KEY ITER times and, under
// the lock, read COUNTER, yield, and write it back plus one: a non-atomic
// read-modify-write that only the lock keeps from losing updates.
func helperHammer(r *reporter, rdb *redis.Client) int {
	ctx := context.Background()
	locker, err := redislock.New(rdb, dlock.WithTTL(2*time.Second), dlock.WithAutoRenew(true),
		dlock.WithRetry(dlock.FixedBackoff(time.Millisecond)))
	if err != nil {
		return r.fail(err)
	}
	key, counter := os.Getenv("KEY"), os.Getenv("COUNTER")
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		acks    int64
		lockErr error
	)
	for g := 0; g < envInt("GOROUTINES"); g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < envInt("ITER"); i++ {
				err := dlock.Do(ctx, locker, key, func(ctx context.Context) error {
					v, err := rdb.Get(ctx, counter).Int64()
					if err != nil && err != redis.Nil {
						return err
					}
					runtime.Gosched()
					return rdb.Set(ctx, counter, v+1, 0).Err()
				})
				mu.Lock()
				if err == nil {
					acks++
				} else if lockErr == nil {
					lockErr = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if lockErr != nil {
		return r.fail(lockErr)
	}
	r.emit(event{Ev: "done", N: acks})
	return 0
}
