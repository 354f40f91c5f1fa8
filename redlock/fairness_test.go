package redlock_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/redislock"
	"github.com/dlock-go/dlock/redlock"
	"github.com/redis/go-redis/v9"
)

// workerEnv makes the test binary a contending process instead of running the
// tests (see TestMain): it holds the comma-separated node addresses.
const workerEnv = "DLOCK_REDLOCK_WORKER"

// workerResult is what a contending process reports: the tokens of its
// acquisitions, in order, and how many of its waits timed out.
type workerResult struct {
	Tokens   []uint64 `json:"tokens"`
	At       []int64  `json:"at"` // when each was granted, in Unix µs
	Timeouts int      `json:"timeouts"`
	Err      string   `json:"err,omitempty"`
}

// contendMain is a contending process: one Client over the nodes named by
// workerEnv, which locks and unlocks DLOCK_REDLOCK_KEY for DLOCK_REDLOCK_RUN
// after a line on stdin says go, each wait bounded by DLOCK_REDLOCK_WAIT, and
// writes its workerResult to stdout. It prints "ready" once its connections
// are up.
func contendMain() int {
	run, _ := time.ParseDuration(os.Getenv("DLOCK_REDLOCK_RUN"))
	wait, _ := time.ParseDuration(os.Getenv("DLOCK_REDLOCK_WAIT"))
	key := os.Getenv("DLOCK_REDLOCK_KEY")
	var nodes []redis.UniversalClient
	for _, a := range strings.Split(os.Getenv(workerEnv), ",") {
		rdb := redis.NewClient(&redis.Options{Addr: a, ContextTimeoutEnabled: true})
		defer rdb.Close()
		if err := rdb.Ping(context.Background()).Err(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		nodes = append(nodes, rdb)
	}
	c, err := redlock.New(nodes, dlock.WithTTL(5*time.Second))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return 1
	}
	var res workerResult
	end := time.Now().Add(run)
	for time.Now().Before(end) {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		l, err := c.Lock(ctx, key)
		cancel()
		if errors.Is(err, dlock.ErrNotObtained) || errors.Is(err, context.DeadlineExceeded) {
			res.Timeouts++
			continue
		}
		if err != nil {
			res.Err = err.Error()
			break
		}
		res.Tokens = append(res.Tokens, l.Token())
		res.At = append(res.At, time.Now().UnixMicro())
		if err := l.Unlock(context.Background()); err != nil {
			res.Err = err.Error()
			break
		}
	}
	_ = json.NewEncoder(os.Stdout).Encode(res)
	return 0
}

// contention is the outcome of processes contending one lock.
type contention struct {
	per       []int   // acquisitions per process
	timeouts  int     // waits that timed out, over every process
	handovers int     // acquisitions by another process than the one before
	jain      float64 // Jain's fairness index of per
	elapsed   time.Duration
	stall     time.Duration // the longest time between two acquisitions
}

// contend runs n processes, one Client each, contending one key on the five
// servers for run, each wait bounded by wait.
func contend(t *testing.T, n int, run, wait time.Duration) contention {
	t.Helper()
	key := fmt.Sprintf("fair-%d-%d", os.Getpid(), time.Now().UnixNano())
	type proc struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		out   *bufio.Scanner
	}
	procs := make([]proc, n)
	for i := range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), workerEnv+"="+strings.Join(addrs(), ","),
			"DLOCK_REDLOCK_KEY="+key, "DLOCK_REDLOCK_RUN="+run.String(), "DLOCK_REDLOCK_WAIT="+wait.String())
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
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<26)
		procs[i] = proc{cmd, stdin, sc}
	}
	for i, p := range procs {
		if !p.out.Scan() || p.out.Text() != "ready" {
			t.Fatalf("process %d did not start: %q %v", i, p.out.Text(), p.out.Err())
		}
	}
	start := time.Now()
	for _, p := range procs {
		if _, err := io.WriteString(p.stdin, "go\n"); err != nil {
			t.Fatal(err)
		}
	}
	var c contention
	type acq struct {
		token uint64
		proc  int
		at    int64
	}
	var all []acq
	for i, p := range procs {
		if !p.out.Scan() {
			t.Fatalf("process %d reported nothing: %v", i, p.out.Err())
		}
		var r workerResult
		if err := json.Unmarshal(p.out.Bytes(), &r); err != nil {
			t.Fatalf("process %d: %v", i, err)
		}
		if r.Err != "" {
			t.Fatalf("process %d: %s", i, r.Err)
		}
		c.per = append(c.per, len(r.Tokens))
		c.timeouts += r.Timeouts
		for j, tok := range r.Tokens {
			all = append(all, acq{tok, i, r.At[j]})
		}
	}
	c.elapsed = time.Since(start)
	slices.SortFunc(all, func(a, b acq) int {
		switch {
		case a.token < b.token:
			return -1
		case a.token > b.token:
			return 1
		}
		return 0
	})
	for i := 1; i < len(all); i++ {
		if all[i].token == all[i-1].token {
			t.Fatalf("token %d handed out twice", all[i].token)
		}
		if all[i].proc != all[i-1].proc {
			c.handovers++
		}
		c.stall = max(c.stall, time.Duration(all[i].at-all[i-1].at)*time.Microsecond)
	}
	var sum, sq float64
	for _, x := range c.per {
		sum += float64(x)
		sq += float64(x) * float64(x)
	}
	if sq > 0 {
		c.jain = sum * sum / (float64(n) * sq)
	}
	return c
}

// TestProcessesShareTheLock has processes with a Client each contend one lock
// without pause: a process that releases must not take the lock again ahead of
// processes that were waiting, so that no wait times out and every process gets
// its share.
func TestProcessesShareTheLock(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	n, run := 8, 3*time.Second
	if v, err := strconv.Atoi(os.Getenv("DLOCK_REDLOCK_PROCS")); err == nil && v > 1 {
		n = v // to measure other loads
	}
	if v, err := time.ParseDuration(os.Getenv("DLOCK_REDLOCK_RUN")); err == nil && v > 0 {
		run = v
	}
	c := contend(t, n, run, 2*time.Second)
	secs := c.elapsed.Seconds()
	t.Logf("%d processes, %v: acquisitions per process %v, %.1f hand-overs/s, Jain %.2f, %d timeouts, longest time without an acquisition %v",
		n, c.elapsed.Round(time.Millisecond), c.per, float64(c.handovers)/secs, c.jain, c.timeouts, c.stall.Round(time.Millisecond))
	if c.timeouts > 0 {
		t.Errorf("%d waits of 2s timed out", c.timeouts)
	}
	if c.jain < 0.8 {
		t.Errorf("Jain's fairness index %.2f, want at least 0.8", c.jain)
	}
	if c.handovers < n {
		t.Errorf("%d hand-overs, want at least %d", c.handovers, n)
	}
}

// TestWaiterIsWokenOnItsNextWait has a Client wait for a key again right after
// its last wait for it ended (its wake-up channels still subscribed): its place
// in each server's waiting set must last for its whole wait, not for the
// attempt's round trip, so that the holder's release wakes it long before the
// holder's TTL would have run out.
func TestWaiterIsWokenOnItsNextWait(t *testing.T) {
	key := fmt.Sprint("next-wait-", time.Now().UnixNano())
	a := newClient(t, dlock.WithTTL(time.Minute))
	b := newClient(t, dlock.WithTTL(time.Minute))
	ctx := ctxT(t, 30*time.Second)
	var rdbs []*redis.Client
	for _, at := range addrs() {
		rdbs = append(rdbs, newRDB(t, at))
	}
	for round := range 2 {
		la, err := a.TryLock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			lb, err := b.Lock(wctx, key)
			if err == nil {
				err = lb.Unlock(ctx)
			}
			got <- err
		}()
		testserver.Eventually(t, 5*time.Second, "b's attempt to reach the servers", func() bool { return marked(key, rdbs) >= 3 })
		if err := la.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("round %d: b: %v", round, err)
		}
	}
}

// TestGrantLeavesNoWaitBehind: an acquisition granted by a majority while the
// other nodes were held elsewhere joined those nodes' waiting sets on the way;
// once it has the lock it must leave them (and the wake-up registrations with
// them), although the caller's context lives on: a process left on a waiting
// set would take the wake-up of a release meant for a waiting process.
func TestGrantLeavesNoWaitBehind(t *testing.T) {
	key := fmt.Sprint("no-wait-left-", time.Now().UnixNano())
	a := newClient(t, dlock.WithTTL(time.Minute))
	b := newClient(t, dlock.WithTTL(time.Minute))
	ctx := ctxT(t, 30*time.Second)
	var rdbs []*redis.Client
	for _, at := range addrs() {
		rdbs = append(rdbs, newRDB(t, at))
	}
	// b waits once, so that its wake-up channels are subscribed.
	la, err := a.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		lb, err := b.Lock(ctx, key)
		if err == nil {
			err = lb.Unlock(ctx)
		}
		got <- err
	}()
	testserver.Eventually(t, 5*time.Second, "b's attempt to reach the servers", func() bool { return marked(key, rdbs) >= 3 })
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	// Another owner holds the lock on two nodes.
	k := redislock.LockKey(key)
	for _, rdb := range rdbs[:2] {
		if err := rdb.Set(ctx, k, rdb.Get(ctx, k).Val()+" elsewhere", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	lb, err := b.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Unlock(ctx)
	testserver.Eventually(t, 5*time.Second, "b to leave the waiting sets", func() bool {
		n := int64(0)
		for _, rdb := range rdbs[:2] {
			n += rdb.ZCard(ctx, k+":waiting").Val()
		}
		return n == 0
	})
}
