package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testproxy"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// Built once by TestMain: the dlock binary and the server the tests lock on.
var (
	dlockBin string
	srv      *testserver.Redis
)

func TestMain(m *testing.M) {
	if os.Getenv("DLOCK_TEST_HELPER") == "count-sigint" {
		os.Exit(countSIGINT())
	}
	os.Exit(testMain(m))
}

// countSIGINT is a command for dlock run: it writes "ok" to $DLOCK_TEST_READY,
// and after the first SIGINT exits with 10 + the number of SIGINTs it got
// within the next half second.
func countSIGINT() int {
	c := make(chan os.Signal, 16)
	signal.Notify(c, os.Interrupt)
	if err := os.WriteFile(os.Getenv("DLOCK_TEST_READY"), []byte("ok"), 0o644); err != nil {
		return 1
	}
	<-c
	n := 1
	quiet := time.After(500 * time.Millisecond)
	for {
		select {
		case <-c:
			n++
		case <-quiet:
			return 10 + n
		}
	}
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "dlock-cli-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	dlockBin = filepath.Join(dir, "dlock")
	if out, err := exec.Command("go", "build", "-o", dlockBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		return 1
	}
	return testserver.Main(m, func(r *testserver.Redis) { srv = r })
}

func redisURL() string { return "redis://" + srv.Addr + "/0" }

// dlockCmd returns an exec.Cmd running the built dlock with DLOCK_REDIS set to
// the test server.
func dlockCmd(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(dlockBin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DLOCK_") && !strings.HasPrefix(kv, "REDIS_URL=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "DLOCK_REDIS="+redisURL())
	cmd.Dir = t.TempDir()
	// Its own process group, so that it never shares the controlling terminal
	// of whoever runs the tests.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	t.Cleanup(func() {
		if cmd.Process != nil && cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_, _ = cmd.Process.Wait()
		}
	})
	return cmd
}

type result struct {
	code           int
	stdout, stderr string
	elapsed        time.Duration
}

// dlockRun runs dlock to completion (bounded) and returns what it did.
func dlockRun(t *testing.T, args ...string) result {
	t.Helper()
	return runCmd(t, dlockCmd(t, args...))
}

func runCmd(t *testing.T, cmd *exec.Cmd) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if cmd.Stdout == nil {
		cmd.Stdout = &stdout
	}
	if cmd.Stderr == nil {
		cmd.Stderr = &stderr
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return wait(t, cmd, start, &stdout, &stderr)
}

func wait(t *testing.T, cmd *exec.Cmd, start time.Time, stdout, stderr *bytes.Buffer) result {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("dlock %v did not finish within 30s; stderr: %s", cmd.Args[1:], stderr)
	}
	r := result{code: childCode(cmd.ProcessState), stdout: stdout.String(), stderr: stderr.String(), elapsed: time.Since(start)}
	return r
}

func newRDB(t *testing.T) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// waitFor polls cond (a check of state another process changes) until it
// holds, failing the test after 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testserver.Eventually(t, 10*time.Second, what, cond)
}

func fileHas(path, s string) func() bool {
	return func() bool {
		b, _ := os.ReadFile(path)
		return strings.Contains(string(b), s)
	}
}

func held(t *testing.T, rdb *redis.Client, key string) func() bool {
	return func() bool {
		// A plain lock's record names its owner after a space while held (a
		// released one is its token alone); the other kinds are hashes.
		v, err := rdb.Get(context.Background(), redislock.LockKey(key)).Result()
		switch {
		case errors.Is(err, redis.Nil):
			return false
		case err == nil:
			return strings.Contains(v, " ")
		}
		n, err := rdb.Exists(context.Background(), redislock.LockKey(key)).Result()
		if err != nil {
			t.Error(err)
		}
		return n == 1
	}
}

// checkOneLine checks a failing dlock's stderr: one line, plus a usage hint for
// usage errors, and no stack trace.
func checkOneLine(t *testing.T, r result) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	want := 1
	if r.code == exitUsage {
		want = 2
		if !strings.Contains(lines[len(lines)-1], "--help") {
			t.Errorf("no usage hint: %q", r.stderr)
		}
	}
	if len(lines) != want || strings.Contains(r.stderr, "goroutine") || strings.Contains(r.stderr, "panic") {
		t.Errorf("stderr is not a one-line error: %q", r.stderr)
	}
	if !strings.HasPrefix(r.stderr, "dlock") {
		t.Errorf("stderr does not start with dlock: %q", r.stderr)
	}
}

func TestRunNeverOverlaps(t *testing.T) {
	key := dlocktest.Key(t)
	marks := filepath.Join(t.TempDir(), "marks")
	script := fmt.Sprintf(`echo "start $$ $(date +%%s%%N)" >> %[1]s; sleep 0.05; echo "stop $$ $(date +%%s%%N)" >> %[1]s`, marks)
	const procs, rounds = 4, 3
	errs := make(chan error, procs)
	for p := 0; p < procs; p++ {
		cmd := dlockCmd(t, "run", "--ttl", "2s", key, "--", "sh", "-c", script)
		go func() {
			for i := 0; i < rounds; i++ {
				if out, err := cmd.CombinedOutput(); err != nil {
					errs <- fmt.Errorf("%v: %s", err, out)
					return
				}
				cmd = &exec.Cmd{Path: cmd.Path, Args: cmd.Args, Env: cmd.Env, Dir: cmd.Dir}
			}
			errs <- nil
		}()
	}
	for p := 0; p < procs; p++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(marks)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2*procs*rounds {
		t.Fatalf("%d marks, want %d:\n%s", len(lines), 2*procs*rounds, b)
	}
	var lastStop int64
	for i := 0; i < len(lines); i += 2 {
		start, stop := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if start[0] != "start" || stop[0] != "stop" || start[1] != stop[1] {
			t.Fatalf("critical sections interleave at line %d:\n%s", i+1, b)
		}
		t0, _ := strconv.ParseInt(start[2], 10, 64)
		t1, _ := strconv.ParseInt(stop[2], 10, 64)
		if t0 < lastStop || t1 < t0 {
			t.Fatalf("critical sections overlap in time at line %d:\n%s", i+1, b)
		}
		lastStop = t1
	}
}

// TestRunFairInArrivalOrder queues three --fair runs behind a holder and checks
// that status counts them and that they run in the order they arrived.
func TestRunFairInArrivalOrder(t *testing.T) {
	key := dlocktest.Key(t)
	order := filepath.Join(t.TempDir(), "order")
	holder, _, ready := startHolder(t, []string{"--fair"}, key, `echo ok $$ > "$1"; exec sleep 30`)
	defer func() { _ = holder.Process.Kill() }()
	b, err := os.ReadFile(ready)
	if err != nil {
		t.Fatal(err)
	}
	childPID, err := strconv.Atoi(strings.Fields(string(b))[1])
	if err != nil {
		t.Fatalf("ready file %q: %v", b, err)
	}

	queued := func(n int) func() bool {
		return func() bool {
			var st lockInfo
			r := dlockRun(t, "status", "--json", key)
			return json.Unmarshal([]byte(r.stdout), &st) == nil && st.Waiters == n
		}
	}
	const waiters = 3
	results := make(chan error, waiters)
	for i := 1; i <= waiters; i++ {
		cmd := dlockCmd(t, "run", "--fair", "--ttl", "2s", key, "--", "sh", "-c", fmt.Sprintf(`echo %d >> %s`, i, order))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { results <- cmd.Wait() }()
		waitFor(t, fmt.Sprintf("%d queued waiters", i), queued(i))
	}
	r := dlockRun(t, "status", key)
	if !strings.Contains(r.stdout, "waiters") {
		t.Errorf("status of a fair lock with waiters does not show them:\n%s", r.stdout)
	}
	var list []lockInfo
	r = dlockRun(t, "list", "--json", key)
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 1 || list[0].Waiters != waiters {
		t.Errorf("list --json of a fair lock with %d waiters: %v\n%s", waiters, err, r.stdout)
	}
	if r = dlockRun(t, "list", key); !strings.Contains(r.stdout, "WAITERS") {
		t.Errorf("list has no WAITERS column:\n%s", r.stdout)
	}

	// The holder's command ends; dlock run releases and the queue drains in order.
	if err := syscall.Kill(childPID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < waiters; i++ {
		if err := <-results; err != nil {
			t.Errorf("waiter: %v", err)
		}
	}
	if b, _ := os.ReadFile(order); string(b) != "1\n2\n3\n" {
		t.Errorf("fair runs ran in order %q, want 1 2 3", b)
	}
	if rh := wait(t, holder, time.Now(), new(bytes.Buffer), new(bytes.Buffer)); rh.code != 128+int(syscall.SIGTERM) {
		t.Errorf("holder: exit %d, want %d", rh.code, 128+int(syscall.SIGTERM))
	}
}

func TestRunExitCodePassesThrough(t *testing.T) {
	for _, tc := range []struct {
		script string
		code   int
	}{
		{"exit 0", 0},
		{"exit 3", 3},
		{"kill -TERM $$", 128 + int(syscall.SIGTERM)},
		{"kill -KILL $$", 128 + int(syscall.SIGKILL)},
	} {
		key := dlocktest.Key(t)
		r := dlockRun(t, "run", key, "--", "sh", "-c", tc.script)
		if r.code != tc.code || r.stdout != "" {
			t.Errorf("%q: exit %d stdout %q stderr %q, want exit %d and no output", tc.script, r.code, r.stdout, r.stderr, tc.code)
		}
		if held(t, newRDB(t), key)() {
			t.Errorf("%q: lock left behind", tc.script)
		}
	}
}

func TestRunPassesEnvironmentAndStreams(t *testing.T) {
	key := dlocktest.Key(t)
	cmd := dlockCmd(t, "run", key, "--", "sh", "-c", `read line; echo "$line|$DLOCK_KEY|$DLOCK_TOKEN"; echo err >&2`)
	cmd.Stdin = strings.NewReader("hello\n")
	r := runCmd(t, cmd)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	parts := strings.Split(strings.TrimSpace(r.stdout), "|")
	if len(parts) != 3 || parts[0] != "hello" || parts[1] != key {
		t.Fatalf("stdout %q, want hello|%s|TOKEN", r.stdout, key)
	}
	if tok, err := strconv.ParseUint(parts[2], 10, 64); err != nil || tok == 0 {
		t.Errorf("DLOCK_TOKEN %q is not a positive integer", parts[2])
	}
	if r.stderr != "err\n" {
		t.Errorf("stderr %q, want only the child's", r.stderr)
	}
	// Tokens increase from one run to the next.
	r2 := runCmd(t, dlockCmd(t, "run", key, "--", "sh", "-c", `echo $DLOCK_TOKEN`))
	t1, _ := strconv.ParseUint(parts[2], 10, 64)
	t2, _ := strconv.ParseUint(strings.TrimSpace(r2.stdout), 10, 64)
	if t2 <= t1 {
		t.Errorf("second token %d not above first %d", t2, t1)
	}
}

func TestRunForwardsSignals(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2} {
		key := dlocktest.Key(t)
		dir := t.TempDir()
		ready, got := filepath.Join(dir, "ready"), filepath.Join(dir, "got")
		script := fmt.Sprintf(`trap 'echo %[1]s > %[2]s; exit 5' %[1]s; echo ok > %[3]s; while :; do sleep 0.02; done`,
			strings.TrimPrefix(signalName(sig), "SIG"), got, ready)
		cmd := dlockCmd(t, "run", key, "--", "sh", "-c", script)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		start := time.Now()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the child to start", fileHas(ready, "ok"))
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		r := wait(t, cmd, start, new(bytes.Buffer), &stderr)
		if r.code != 5 || !fileHas(got, strings.TrimPrefix(signalName(sig), "SIG"))() {
			t.Errorf("%v: exit %d (want the child's 5), child saw it: %v; stderr %q", sig, r.code, fileHas(got, "")(), r.stderr)
		}
		if held(t, newRDB(t), key)() {
			t.Errorf("%v: lock left behind", sig)
		}
	}
}

// startHolder starts "dlock run KEY -- sh -c SCRIPT" and waits until the child
// has written "ok" to the ready file the script is given as $1.
func startHolder(t *testing.T, flags []string, key, script string) (*exec.Cmd, *bytes.Buffer, string) {
	t.Helper()
	ready := filepath.Join(t.TempDir(), "ready")
	args := append(append([]string{"run"}, flags...), key, "--", "sh", "-c", script, "sh", ready)
	cmd := dlockCmd(t, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the holder's command to start", fileHas(ready, "ok"))
	return cmd, &stderr, ready
}

func TestRunLockLostStopsChild(t *testing.T) {
	for _, tc := range []struct {
		name, trap string
	}{
		{"child stops on SIGTERM", `trap 'echo TERM >> "$1"; exit 0' TERM`},
		{"child ignoring SIGTERM is killed after the grace", `trap 'echo TERM >> "$1"' TERM`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := dlocktest.Key(t)
			rdb := newRDB(t)
			script := tc.trap + `; echo ok >> "$1"; while :; do sleep 0.02; done`
			cmd, stderr, ready := startHolder(t, []string{"--ttl", "600ms", "--grace", "300ms"}, key, script)
			start := time.Now()
			if err := rdb.Del(context.Background(), redislock.LockKey(key)).Err(); err != nil {
				t.Fatal(err)
			}
			r := wait(t, cmd, start, new(bytes.Buffer), stderr)
			if r.code != exitLockLost {
				t.Fatalf("exit %d, want %d; stderr %q", r.code, exitLockLost, r.stderr)
			}
			if !fileHas(ready, "TERM")() {
				t.Errorf("the child never got SIGTERM")
			}
			if !strings.Contains(r.stderr, "lost the lock") {
				t.Errorf("stderr %q does not say the lock was lost", r.stderr)
			}
			// Once: no "lock lost" after "lost the lock", no "not held" after
			// "no longer holds it".
			if strings.Contains(r.stderr, "lock lost") || strings.Contains(r.stderr, "not held") {
				t.Errorf("stderr %q says the loss more than once", r.stderr)
			}
			// Renewal every ttl/3, then at most the grace period (plus slack
			// for a loaded machine).
			if r.elapsed > 4*time.Second {
				t.Errorf("took %v to stop the child", r.elapsed)
			}
		})
	}
}

func TestKilledHolderFreesLockAfterTTL(t *testing.T) {
	key := dlocktest.Key(t)
	const ttl = time.Second
	pidFile := filepath.Join(t.TempDir(), "pid")
	holder, _, _ := startHolder(t, []string{"--ttl", ttl.String()}, key,
		fmt.Sprintf(`echo $$ > %s; echo ok > "$1"; exec sleep 30`, pidFile))
	b, _ := os.ReadFile(pidFile)
	childPID, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if err := holder.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_, _ = holder.Process.Wait()
	killed := time.Now()

	r := dlockRun(t, "run", "--wait", "10s", key, "--", "true")
	if r.code != 0 {
		t.Fatalf("next run: exit %d, stderr %q", r.code, r.stderr)
	}
	waited := time.Since(killed)
	if waited > ttl+3*time.Second {
		t.Errorf("next run got in %v after the kill, TTL %v", waited, ttl)
	}
	// The orphaned child got SIGTERM when dlock died.
	waitFor(t, "the orphaned child to end", func() bool {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", childPID))
		return err != nil || strings.Contains(string(st), ") Z ")
	})
}

func TestRunExitCodes(t *testing.T) {
	rdb := newRDB(t)
	busy := dlocktest.Key(t)
	holder, _, _ := startHolder(t, nil, busy, `echo ok > "$1"; exec sleep 30`)
	defer func() { _ = holder.Process.Kill() }()
	notExec := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	foreign := dlocktest.Key(t) + "-foreign"
	rdb.Set(context.Background(), redislock.LockKey(foreign), "x", time.Minute)
	foreignFence, foreignHash := foreign+"-fence", foreign+"-hash"
	rdb.RPush(context.Background(), redislock.FenceKey(foreignFence), "x")
	rdb.HSet(context.Background(), redislock.LockKey(foreignHash), "x", "y")
	t.Cleanup(func() {
		rdb.Del(context.Background(), redislock.LockKey(foreign), redislock.FenceKey(foreignFence), redislock.LockKey(foreignHash))
	})
	port, err := testserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	down := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	guarded := testserver.StartRedis(t)
	admin := redis.NewClient(&redis.Options{Addr: guarded.Addr})
	err = admin.ConfigSet(context.Background(), "requirepass", "right-pw").Err()
	admin.Close()
	if err != nil {
		t.Fatal(err)
	}
	wrongPass := "redis://:s3cret-pw@" + guarded.Addr + "/0"
	key := dlocktest.Key(t)
	marker := filepath.Join(t.TempDir(), "ran")

	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unknown flag", []string{"run", "--bogus", key, "--", "true"}, 64, "not defined: --bogus"},
		{"key forgotten", []string{"run", "--", "echo", "hi"}, 64, `missing KEY before "--"`},
		{"flags named as in help", []string{"run", "--ttl", "10", key, "--", "true"}, 64, `for flag --ttl: missing unit`},
		{"command flag without --", []string{"run", key, "ls", "-l"}, 64, `missing "--" between KEY and COMMAND`},
		{"status of two keys", []string{"status", key, key}, 64, "one KEY expected"},
		{"missing --", []string{"run", key, "true"}, 64, `missing "--"`},
		{"missing command", []string{"run", key, "--"}, 64, "missing COMMAND"},
		{"missing key", []string{"run"}, 64, "missing KEY"},
		{"bad key", []string{"run", "a{b}", "--", "true"}, 64, "reserved"},
		{"ttl without unit", []string{"run", "--ttl", "10", key, "--", "true"}, 64, "missing unit"},
		{"negative ttl", []string{"run", "--ttl", "-1s", key, "--", "true"}, 64, "negative"},
		{"zero ttl", []string{"run", "--ttl", "0", key, "--", "true"}, 64, "minimum"},
		{"huge ttl", []string{"run", "--ttl", "1e9h", key, "--", "true"}, 64, "not a duration"},
		{"ttl abc", []string{"run", "--ttl", "abc", key, "--", "true"}, 64, "not a duration"},
		{"sub-ms ttl", []string{"run", "--ttl", "1.5s5us", key, "--", "true"}, 64, "whole number of milliseconds"},
		{"negative wait", []string{"run", "--wait", "-1s", key, "--", "true"}, 64, "negative"},
		{"renew not below ttl", []string{"run", "--ttl", "1s", "--renew-every", "1s", key, "--", "true"}, 64, "renew-every"},
		{"redlock even", []string{"run", "--redis", redisURL(), "--redis", redisURL(), key, "--", "true"}, 64, "odd number"},
		{"redlock same server", []string{"run", "--redis", redisURL(), "--redis", redisURL(), "--redis", redisURL(), key, "--", "true"}, 64, "same server"},
		{"etcd bad URL", []string{"run", "--etcd", "ftp://127.0.0.1:2379", key, "--", "true"}, 64, "scheme"},
		{"etcd URL with a path", []string{"run", "--etcd", "https://127.0.0.1:2379/x", key, "--", "true"}, 64, "no path"},
		{"zk bad address", []string{"run", "--zk", "127.0.0.1", key, "--", "true"}, 64, "host:port"},
		{"two backends", []string{"run", "--etcd", "127.0.0.1:2379", "--zk", "127.0.0.1:2181", key, "--", "true"}, 64, "one backend"},
		{"no permits", []string{"run", "-n", "0", key, "--", "true"}, 64, "1 to"},
		{"too many permits", []string{"run", "-n", "2000000", key, "--", "true"}, 64, "1 to"},
		{"shared and exclusive", []string{"run", "-s", "-x", key, "--", "true"}, 64, "either shared or exclusive"},
		{"shared semaphore", []string{"run", "-s", "-n", "2", key, "--", "true"}, 64, "either a semaphore or a read-write lock"},
		{"fair semaphore", []string{"run", "--fair", "-n", "2", key, "--", "true"}, 64, "--fair with"},
		{"redis and zk", []string{"run", "--redis", redisURL(), "--zk", "127.0.0.1:2181", key, "--", "true"}, 64, "one backend"},
		{"bad URL keeps password", []string{"run", "--redis", "redis://u:s3cret-pw@[::1/0", key, "--", "true"}, 64, "bad Redis URL"},
		{"bad port", []string{"run", "--redis", "redis://127.0.0.1:99999/0", key, "--", "true"}, 64, "no valid port"},
		{"missing socket", []string{"run", "--redis", "unix://" + filepath.Join(t.TempDir(), "nope.sock"), key, "--", "true"}, 69, "cannot reach"},
		{"wrong scheme", []string{"run", "--redis", "http://127.0.0.1:1", key, "--", "true"}, 64, "bad Redis URL"},
		{"unreachable", []string{"run", "--redis", down, key, "--", "true"}, 69, "cannot reach"},
		{"wrong password", []string{"run", "--redis", wrongPass, key, "--", "true"}, 69, "WRONGPASS"},
		{"wrong one-letter password, in the server's words", []string{"run", "--redis", "redis://:e@" + guarded.Addr + "/0", key, "--", "true"}, 69, "WRONGPASS invalid username-password pair"},
		{"status unreachable", []string{"status", "--redis", down, key}, 69, "cannot reach"},
		{"not found", []string{"run", key, "--", "no-such-command-dlock"}, 127, "command not found"},
		{"not executable", []string{"run", key, "--", notExec}, 126, "permission denied"},
		{"busy, no wait", []string{"run", "--wait", "0", busy, "--", "touch", marker}, 75, "not waiting"},
		{"busy, wait", []string{"run", "--wait", "300ms", busy, "--", "touch", marker}, 75, "gave up after"},
		{"busy, -E", []string{"run", "--wait", "0", "-E", "3", busy, "--", "touch", marker}, 3, "held by"},
		{"bad -E", []string{"run", "-E", "300", key, "--", "true"}, 64, "0..255"},
		{"-E not a number", []string{"run", "-E", "abc", key, "--", "true"}, 64, `invalid value "abc" for flag -E: not an exit code: want a whole number 0..255`},
		{"foreign data", []string{"run", foreign, "--", "true"}, 65, `key "` + foreign + `" holds data that is not a dlock lock (Redis key "` + redislock.LockKey(foreign) + `" is a string)`},
		{"status of foreign data", []string{"status", foreign}, 65, `key "` + foreign + `" holds data that is not a dlock lock (Redis key "` + redislock.LockKey(foreign) + `" is a string)`},
		{"unlock of foreign data", []string{"unlock", "--force", foreign}, 65, `key "` + foreign + `" holds data that is not a dlock lock (Redis key "` + redislock.LockKey(foreign) + `" is a string)`},
		{"foreign fence counter", []string{"run", foreignFence, "--", "true"}, 65, `(Redis key "` + redislock.FenceKey(foreignFence) + `" is a list)`},
		{"foreign hash", []string{"status", foreignHash}, 65, `(Redis key "` + redislock.LockKey(foreignHash) + `" is a hash without a lock owner)`},
		{"status free", []string{"status", key}, 1, ""},
		{"status missing key", []string{"status"}, 64, "missing KEY"},
		{"unlock without force", []string{"unlock", busy}, 64, "without --force"},
		{"unlock free", []string{"unlock", "--force", key}, 1, "not held"},
		{"list bad pattern", []string{"list", "a{"}, 64, "pattern"},
		{"unknown command", []string{"frobnicate"}, 64, "unknown command"},
		{"completion unknown shell", []string{"completion", "fish"}, 64, "unknown shell"},
	} {
		r := dlockRun(t, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%s: exit %d stderr %q, want exit %d and %q", tc.name, r.code, r.stderr, tc.code, tc.want)
			continue
		}
		if tc.code != 1 {
			checkOneLine(t, r)
		}
		if strings.Contains(r.stderr, "s3cret") {
			t.Errorf("%s: password echoed: %q", tc.name, r.stderr)
		}
		if tc.args[0] == "run" && r.stdout != "" {
			t.Errorf("%s: dlock run wrote to stdout: %q", tc.name, r.stdout)
		}
		if tc.name == "unreachable" && r.elapsed > 5*time.Second {
			t.Errorf("unreachable server took %v to report", r.elapsed)
		}
	}
	if held(t, rdb, key)() {
		t.Errorf("a failed run left the lock %q behind", key)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a command ran although its lock was not obtained")
	}
	if busyNow := held(t, rdb, busy); !busyNow() {
		t.Errorf("the holder lost its lock")
	}
}

func TestRunInterruptedWhileWaiting(t *testing.T) {
	key := dlocktest.Key(t)
	holder, _, _ := startHolder(t, nil, key, `echo ok > "$1"; exec sleep 30`)
	defer func() { _ = holder.Process.Kill() }()
	marker := filepath.Join(t.TempDir(), "ran")
	cmd := dlockCmd(t, "run", key, "--", "touch", marker)
	term := ptyStart(t, cmd, 0)
	term.waitFor("waiting")
	_ = cmd.Process.Signal(syscall.SIGINT)
	term.finish()
	r := result{code: childCode(cmd.ProcessState), stderr: term.text()}
	if r.code != 128+int(syscall.SIGINT) {
		t.Errorf("exit %d, want %d; stderr %q", r.code, 128+int(syscall.SIGINT), r.stderr)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the command ran although the lock was never obtained")
	}
}

func TestStatusListUnlock(t *testing.T) {
	rdb := newRDB(t)
	prefix := dlocktest.Key(t)
	keyA, keyB := prefix+":a", prefix+":b"
	holderA, stderrA, _ := startHolder(t, []string{"--description", "nightly report", "--ttl", "1s"}, keyA, `echo ok > "$1"; exec sleep 30`)
	holderB, _, _ := startHolder(t, nil, keyB, `echo ok > "$1"; exec sleep 30`)
	defer func() { _ = holderB.Process.Kill() }()

	r := dlockRun(t, "status", keyA)
	host, _ := os.Hostname()
	for _, want := range []string{keyA, "held", host, strconv.Itoa(holderA.Process.Pid), "nightly report", "ttl", "token"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status output lacks %q:\n%s", want, r.stdout)
		}
	}
	if r.code != 0 {
		t.Errorf("status of a held lock: exit %d", r.code)
	}

	r = dlockRun(t, "status", "--json", keyA)
	var st lockInfo
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	if !st.Held || st.Token == 0 || st.TTLms <= 0 || st.Holder == nil || st.Holder.PID != holderA.Process.Pid ||
		st.Holder.Description != "nightly report" || st.Holder.Host != host || time.Since(st.Holder.Since) > time.Minute {
		t.Errorf("status --json: %+v %+v", st, st.Holder)
	}

	r = dlockRun(t, "list", prefix+":*")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "KEY") || !strings.HasPrefix(lines[1], keyA) || !strings.HasPrefix(lines[2], keyB) {
		t.Errorf("list:\n%s", r.stdout)
	}
	r = dlockRun(t, "list", "--json", prefix+":*")
	var list []lockInfo
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 2 || list[0].Key != keyA || list[1].Key != keyB {
		t.Errorf("list --json: %v\n%s", err, r.stdout)
	}
	r = dlockRun(t, "list", "--names", prefix+":*")
	if r.stdout != keyA+"\n"+keyB+"\n" {
		t.Errorf("list --names: %q", r.stdout)
	}
	r = dlockRun(t, "list", "--json", prefix+":nothing*")
	if strings.TrimSpace(r.stdout) != "[]" || r.code != 0 {
		t.Errorf("empty list --json: exit %d %q", r.code, r.stdout)
	}

	r = dlockRun(t, "unlock", "--force", keyA)
	if r.code != 0 || !strings.Contains(r.stdout, "nightly report") || !strings.Contains(r.stdout, strconv.Itoa(holderA.Process.Pid)) {
		t.Errorf("unlock --force: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	if in, err := redislock.NewInspector(rdb); err != nil {
		t.Error(err)
	} else if info, err := in.Inspect(context.Background(), keyA); err != nil || info.LastToken == 0 {
		t.Errorf("unlock --force lost the last token: %+v, %v", info, err)
	}
	// The holder is told at once and stops its command.
	rh := wait(t, holderA, time.Now(), new(bytes.Buffer), stderrA)
	if rh.code != exitLockLost {
		t.Errorf("holder after unlock --force: exit %d, stderr %q", rh.code, rh.stderr)
	}

	r = dlockRun(t, "unlock", "--force", "--json", keyB)
	var un lockInfo
	if err := json.Unmarshal([]byte(r.stdout), &un); err != nil || un.Key != keyB || un.Holder == nil || un.Holder.PID != holderB.Process.Pid {
		t.Errorf("unlock --force --json: %v %q", err, r.stdout)
	}
}

func TestListScansEveryClusterMaster(t *testing.T) {
	cluster := testserver.StartCluster(t, 3)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	locker, err := redislock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	prefix := dlocktest.Key(t)
	var keys []string
	ctx := context.Background()
	for i := 0; i < 12; i++ {
		key := fmt.Sprintf("%s:%02d", prefix, i)
		lease, err := locker.Lock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lease.Unlock(context.Background()) })
		keys = append(keys, key)
	}
	cmd := dlockCmd(t, "list", "--json", prefix+":*")
	cmd.Env = append(cmd.Env, "DLOCK_REDIS=redis://"+cluster.Nodes[0].Addr)
	r := runCmd(t, cmd)
	var list []lockInfo
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatalf("%v: %q %q", err, r.stdout, r.stderr)
	}
	var got []string
	for _, li := range list {
		got = append(got, li.Key)
	}
	if strings.Join(got, " ") != strings.Join(keys, " ") {
		t.Errorf("list on a cluster found %v, want %v", got, keys)
	}
	// run and status through any node, whatever slot the key is in.
	for i, node := range cluster.Nodes {
		url := "redis://" + node.Addr
		key := fmt.Sprintf("%s:run%d", prefix, i)
		cmd := dlockCmd(t, "run", "--redis", url, key, "--", "sh", "-c", "echo $DLOCK_TOKEN")
		if r := runCmd(t, cmd); r.code != 0 || strings.TrimSpace(r.stdout) == "" {
			t.Errorf("run on a cluster through %s: exit %d %q %q", node.Addr, r.code, r.stdout, r.stderr)
		}
		if r := dlockRun(t, "status", "--redis", url, keys[i]); r.code != 0 || !strings.Contains(r.stdout, "held") {
			t.Errorf("status on a cluster through %s: exit %d %q %q", node.Addr, r.code, r.stdout, r.stderr)
		}
	}
}

func TestWaitingShownOnTerminalOnly(t *testing.T) {
	key := dlocktest.Key(t)
	holder, _, _ := startHolder(t, []string{"--description", "the holder"}, key, `echo ok > "$1"; exec sleep 30`)
	defer func() { _ = holder.Process.Kill() }()

	// Not a terminal: only the one-line reason.
	r := dlockRun(t, "run", "--wait", "1500ms", key, "--", "true")
	if r.code != exitNotObtained || strings.Contains(r.stderr, "waiting") || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("without a terminal: exit %d stderr %q", r.code, r.stderr)
	}

	cmd := dlockCmd(t, "run", "--wait", "1500ms", key, "--", "true")
	term := ptyStart(t, cmd, 0)
	term.finish()
	out := term.text()
	if code := childCode(cmd.ProcessState); code != exitNotObtained {
		t.Errorf("on a terminal: exit %d", code)
	}
	for _, want := range []string{"waiting", key, "the holder", strconv.Itoa(holder.Process.Pid)} {
		if !strings.Contains(out, want) {
			t.Errorf("terminal output lacks %q: %q", want, out)
		}
	}
}

func TestHelpForEveryCommand(t *testing.T) {
	for _, c := range commands() {
		r := dlockRun(t, c.name, "--help")
		if r.code != 0 || !strings.Contains(r.stdout+r.stderr, "usage: dlock "+c.name) || !strings.Contains(r.stdout+r.stderr, "examples:") {
			t.Errorf("dlock %s --help: exit %d\n%s%s", c.name, r.code, r.stdout, r.stderr)
		}
	}
	r := dlockRun(t, "help")
	for _, c := range commands() {
		if !strings.Contains(r.stdout, c.name) {
			t.Errorf("dlock help does not list %s", c.name)
		}
	}
	if r := dlockRun(t, "help", "run"); !strings.Contains(r.stdout, "exit codes:") || !strings.Contains(r.stdout, "0: a single attempt, no waiting") {
		t.Errorf("dlock help run: %q", r.stdout)
	}
	if r := dlockRun(t); r.code != exitUsage {
		t.Errorf("dlock without arguments: exit %d", r.code)
	}
}

func TestCompletionScriptsParse(t *testing.T) {
	for _, shell := range []string{"bash", "zsh"} {
		r := dlockRun(t, "completion", shell)
		if r.code != 0 || !strings.Contains(r.stdout, "--ttl") || !strings.Contains(r.stdout, "unlock") {
			t.Errorf("completion %s: exit %d %q", shell, r.code, r.stdout)
			continue
		}
		if _, err := exec.LookPath(shell); err != nil {
			t.Logf("%s not installed: syntax not checked", shell)
			continue
		}
		check := exec.Command(shell, "-n")
		check.Stdin = strings.NewReader(r.stdout)
		if out, err := check.CombinedOutput(); err != nil {
			t.Errorf("%s -n rejects the script: %v\n%s", shell, err, out)
		}
	}
	// bash completes the subcommands, the flags of run, and held lock names.
	if bash, err := exec.LookPath("bash"); err == nil {
		key := dlocktest.Key(t)
		holder, _, _ := startHolder(t, nil, key, `echo ok > "$1"; exec sleep 30`)
		defer func() { _ = holder.Process.Kill() }()
		colonKey := key + ":nightly:job"
		holder2, _, _ := startHolder(t, nil, colonKey, `echo ok > "$1"; exec sleep 30`)
		defer func() { _ = holder2.Process.Kill() }()
		// As bash splits a word at the ':' of COMP_WORDBREAKS.
		script := dlockRun(t, "completion", "bash").stdout + `
COMP_WORDS=(dlock ru); COMP_CWORD=1; _dlock; echo "${COMPREPLY[*]}"
COMP_WORDS=(dlock run --tt); COMP_CWORD=2; _dlock; echo "${COMPREPLY[*]}"
COMP_WORDS=(dlock status "$1"); COMP_CWORD=2; _dlock; echo "${COMPREPLY[*]}"
COMP_LINE="dlock status $2:nightly:j"; COMP_POINT=${#COMP_LINE}
COMP_WORDS=(dlock status "$2" : nightly : j); COMP_CWORD=6; _dlock; echo "${COMPREPLY[*]}"
`
		cmd := dlockCmd(t, "")
		cmd.Path, cmd.Args = bash, []string{"bash", "-c", script, "bash", key[:len(key)-4], key}
		cmd.Env = append(cmd.Env, "PATH="+filepath.Dir(dlockBin)+":"+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		if want := "run\n--ttl\n" + key + " " + colonKey + "\njob\n"; err != nil || string(out) != want {
			t.Errorf("bash completion: %v %q, want %q", err, out, want)
		}
	}
}

func TestOutputToClosedPipe(t *testing.T) {
	key := dlocktest.Key(t)
	holder, _, _ := startHolder(t, nil, key, `echo ok > "$1"; exec sleep 30`)
	defer func() { _ = holder.Process.Kill() }()
	for _, args := range [][]string{{"list"}, {"status", key}, {"completion", "bash"}, {"help"}} {
		cmd := dlockCmd(t, args...)
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		pr.Close() // nobody reads
		cmd.Stdout = pw
		r := runCmd(t, cmd)
		pw.Close()
		if r.code == 2 || strings.Contains(r.stderr, "panic") || strings.Contains(r.stderr, "goroutine") {
			t.Errorf("dlock %v to a closed pipe: exit %d stderr %q", args, r.code, r.stderr)
		}
	}
}

func TestRunCtrlCReachesCommandOnce(t *testing.T) {
	key := dlocktest.Key(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ready := filepath.Join(t.TempDir(), "ready")
	cmd := dlockCmd(t, "run", key, "--", self)
	cmd.Env = append(cmd.Env, "DLOCK_TEST_HELPER=count-sigint", "DLOCK_TEST_READY="+ready)
	term := ptyStart(t, cmd, withControllingTerminal)
	waitFor(t, "the command to start", fileHas(ready, "ok"))
	term.write("\x03") // Ctrl-C: SIGINT to the terminal's foreground group
	term.finish()
	if code := childCode(cmd.ProcessState); code != 11 {
		t.Errorf("exit %d: the command got %d SIGINTs, want 1; terminal: %q", code, code-10, term.text())
	}
}

func TestRunLostLockPolicies(t *testing.T) {
	// The loss that only the release notices needs a holder that is told of
	// nothing before: one that may not subscribe to any channel (its loss
	// subscription, set up after its grant, would otherwise check its holding
	// once and find the deletion if it came first).
	admin := newRDB(t)
	if err := admin.Do(context.Background(), "ACL", "SETUSER", "nochannels", "on", ">pw", "~*", "resetchannels", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		flags []string
		say   string
		code  int
		url   string
	}{
		{"warn keeps the command running", []string{"--ttl", "600ms", "--on-lost", "warn"}, "ran partly without the lock", 0, redisURL()},
		{"loss noticed at release", nil, "before the command ended", exitLockLost, "redis://nochannels:pw@" + srv.Addr + "/0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := dlocktest.Key(t)
			dir := t.TempDir()
			stderrFile, goFile := filepath.Join(dir, "stderr"), filepath.Join(dir, "go")
			f, err := os.Create(stderrFile)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			ready := filepath.Join(dir, "ready")
			args := append(append([]string{"run"}, tc.flags...), key, "--", "sh", "-c",
				`trap 'echo TERM >> "$1"' TERM; echo ok >> "$1"; while [ ! -e "$2" ]; do sleep 0.02; done`, "sh", ready, goFile)
			cmd := dlockCmd(t, args...)
			cmd.Env = append(cmd.Env, "DLOCK_REDIS="+tc.url)
			cmd.Stderr = f
			start := time.Now()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the command to start", fileHas(ready, "ok"))
			if err := newRDB(t).Del(context.Background(), redislock.LockKey(key)).Err(); err != nil {
				t.Fatal(err)
			}
			if tc.flags != nil {
				waitFor(t, "the loss warning", fileHas(stderrFile, "lost the lock"))
			}
			if err := os.WriteFile(goFile, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			r := wait(t, cmd, start, new(bytes.Buffer), new(bytes.Buffer))
			b, _ := os.ReadFile(stderrFile)
			if r.code != tc.code || !strings.Contains(string(b), tc.say) {
				t.Errorf("exit %d stderr %q, want %d and %q", r.code, b, tc.code, tc.say)
			}
			if fileHas(ready, "TERM")() {
				t.Errorf("the command got SIGTERM")
			}
		})
	}
}

func TestDemoStillRuns(t *testing.T) {
	r := dlockRun(t, "demo", "--workers", "2", "--rounds", "5", "--stock", "5")
	if r.code != 0 || !strings.Contains(r.stdout, "with dlock") || !strings.Contains(r.stdout, "nothing is oversold") {
		t.Errorf("demo: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = dlockRun(t, "demo", "--redis", "redis://u:s3cret-pw@[bad")
	if r.code != exitUsage || strings.Contains(r.stderr, "s3cret") {
		t.Errorf("demo with a bad URL: exit %d stderr %q", r.code, r.stderr)
	}
}

func TestRunRenewsWhileCommandRuns(t *testing.T) {
	key := dlocktest.Key(t)
	const ttl = 300 * time.Millisecond
	holder, stderr, ready := startHolder(t, []string{"--ttl", ttl.String()}, key,
		`echo ok > "$1"; while [ ! -e "$1.done" ]; do sleep 0.02; done`)
	start := time.Now()
	// Three TTLs later the lock is still held: nobody else gets in.
	for time.Since(start) < 3*ttl {
		if r := dlockRun(t, "run", "--wait", "0", key, "--", "true"); r.code != exitNotObtained {
			t.Fatalf("another run got exit %d %v into a renewed %v lease: %q", r.code, time.Since(start), ttl, r.stderr)
		}
	}
	if err := os.WriteFile(ready+".done", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := wait(t, holder, start, new(bytes.Buffer), stderr); r.code != 0 {
		t.Errorf("holder: exit %d %q", r.code, r.stderr)
	}
}

func TestServerFromEnvironment(t *testing.T) {
	port, err := testserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	down := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	for _, tc := range []struct {
		name string
		env  []string
		code int
	}{
		{"DLOCK_REDIS", []string{"DLOCK_REDIS=" + redisURL()}, 0},
		{"REDIS_URL", []string{"DLOCK_REDIS=", "REDIS_URL=" + redisURL()}, 0},
		{"DLOCK_REDIS wins", []string{"DLOCK_REDIS=" + redisURL(), "REDIS_URL=" + down}, 0},
		{"--redis wins", []string{"DLOCK_REDIS=" + down}, 0},
		{"none", []string{"DLOCK_REDIS="}, exitUsage},
		{"several", []string{"DLOCK_REDIS=" + redisURL() + " " + redisURL()}, exitUsage},
	} {
		args := []string{"run", dlocktest.Key(t), "--", "true"}
		if tc.name == "--redis wins" {
			args = append([]string{"run", "--redis", redisURL()}, args[1:]...)
		}
		cmd := dlockCmd(t, args...)
		cmd.Env = append(cmd.Env, tc.env...)
		if r := runCmd(t, cmd); r.code != tc.code {
			t.Errorf("%s: exit %d, want %d; stderr %q", tc.name, r.code, tc.code, r.stderr)
		}
	}
}

func TestRunLockLostOnSilentNetwork(t *testing.T) {
	key := dlocktest.Key(t)
	proxy := testproxy.Start(t, srv.Addr)
	const ttl, grace = 600 * time.Millisecond, 300 * time.Millisecond
	cmd, stderr, ready := startHolder(t, []string{"--redis", "redis://" + proxy.Addr + "/0", "--ttl", ttl.String(), "--grace", grace.String()},
		key, `trap 'echo TERM >> "$1"; exit 0' TERM; echo ok >> "$1"; while :; do sleep 0.02; done`)
	start := time.Now()
	proxy.Blackhole(testproxy.Upstream, true)
	proxy.Blackhole(testproxy.Downstream, true)
	r := wait(t, cmd, start, new(bytes.Buffer), stderr)
	if r.code != exitLockLost || !fileHas(ready, "TERM")() {
		t.Fatalf("exit %d (want %d), child got SIGTERM: %v; stderr %q", r.code, exitLockLost, fileHas(ready, "TERM")(), r.stderr)
	}
	// Noticed by the lease's local deadline: at most a TTL after the cut, then
	// at most the grace (plus slack for a loaded machine).
	if limit := ttl + grace + 2*time.Second; r.elapsed > limit {
		t.Errorf("took %v to give up a lock behind a silent network, limit %v", r.elapsed, limit)
	}
}

// TestStatusListEscapeHolderText checks that holder-supplied text (a dlock run
// --description, a library lease's WithMetadata) reaches the terminal with its
// control characters escaped, in status, list and unlock, and unchanged in JSON.
func TestStatusListEscapeHolderText(t *testing.T) {
	prefix := dlocktest.Key(t)
	keyA, keyB := prefix+":a", prefix+":b"
	const desc = "deploy\x1b]0;pwned\x07\x1b[31m red\nforged-row\tx \u202e txt.exe \u009b2J"
	holder, _, _ := startHolder(t, []string{"--description", desc}, keyA, `echo ok > "$1"; exec sleep 30`)
	defer func() { _ = holder.Process.Kill() }()
	locker, err := redislock.New(newRDB(t), dlock.WithMetadata(desc))
	if err != nil {
		t.Fatal(err)
	}
	lease, err := locker.Lock(context.Background(), keyB)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lease.Unlock(context.Background()) }()

	raw := func(what, out string) {
		t.Helper()
		for _, bad := range []string{"\x1b", "\x07", "\u009b", "\u202e", "\nforged", "\tx"} {
			if strings.Contains(out, bad) {
				t.Errorf("%s prints %q raw:\n%s", what, bad, out)
			}
		}
	}
	for _, key := range []string{keyA, keyB} {
		r := dlockRun(t, "status", key)
		raw("status", r.stdout)
		if !strings.Contains(r.stdout, `\x1b[31m red\nforged-row\tx \u202e txt.exe \u009b2J`) {
			t.Errorf("status does not show the escaped text:\n%s", r.stdout)
		}
		r = dlockRun(t, "status", "--json", key)
		raw("status --json", r.stdout)
		var li lockInfo
		if err := json.Unmarshal([]byte(r.stdout), &li); err != nil {
			t.Fatalf("status --json: %v\n%s", err, r.stdout)
		}
		if got := li.Metadata; li.Holder != nil {
			got = li.Holder.Description
			if got != desc {
				t.Errorf("status --json description %q, want %q", got, desc)
			}
		} else if got != desc {
			t.Errorf("status --json metadata %q, want %q", got, desc)
		}
	}
	r := dlockRun(t, "list", prefix+":*")
	raw("list", r.stdout)
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(lines) != 3 {
		t.Errorf("list of 2 locks prints %d lines:\n%s", len(lines), r.stdout)
	}
	r = dlockRun(t, "list", "--json", prefix+":*")
	raw("list --json", r.stdout)
	var list []lockInfo
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 2 || list[1].Metadata != desc {
		t.Errorf("list --json: %v\n%s", err, r.stdout)
	}
	r = dlockRun(t, "unlock", "--force", keyB)
	raw("unlock", r.stdout)
	if r.code != 0 {
		t.Errorf("unlock --force: exit %d %q", r.code, r.stderr)
	}
}

// gone reports whether process pid has ended (reaped, or a zombie waiting for
// its reaper).
func gone(pid int) func() bool {
	return func() bool {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		return err != nil || strings.Contains(string(st), ") Z ")
	}
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file %q: %v", b, err)
	}
	return pid
}

// TestRunLockLostStopsGrandchildren loses the lock of a command that started a
// process of its own, and checks that this grandchild is stopped too.
func TestRunLockLostStopsGrandchildren(t *testing.T) {
	key := dlocktest.Key(t)
	cmd, stderr, ready := startHolder(t, []string{"--ttl", "600ms", "--grace", "300ms"}, key,
		`sleep 100 & echo $! > "$1.pid"; echo ok > "$1"; wait`)
	grandchild := readPID(t, ready+".pid")
	t.Cleanup(func() { _ = syscall.Kill(grandchild, syscall.SIGKILL) })
	start := time.Now()
	if err := newRDB(t).Del(context.Background(), redislock.LockKey(key)).Err(); err != nil {
		t.Fatal(err)
	}
	if r := wait(t, cmd, start, new(bytes.Buffer), stderr); r.code != exitLockLost {
		t.Fatalf("exit %d, want %d; stderr %q", r.code, exitLockLost, r.stderr)
	}
	if !gone(grandchild)() {
		t.Errorf("the command's child %d runs on after dlock lost the lock and exited", grandchild)
	}
}

// TestRunStopsWhatCommandLeavesBehind checks that a background job of the
// command does not outlive the lock: it is stopped before the release.
func TestRunStopsWhatCommandLeavesBehind(t *testing.T) {
	key := dlocktest.Key(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	r := dlockRun(t, "run", "--grace", "300ms", key, "--", "sh", "-c", `sleep 100 & echo $! > "$1"`, "sh", pidFile)
	grandchild := readPID(t, pidFile)
	t.Cleanup(func() { _ = syscall.Kill(grandchild, syscall.SIGKILL) })
	if r.code != 0 || !strings.Contains(r.stderr, "left processes running") {
		t.Errorf("exit %d stderr %q, want 0 and a note", r.code, r.stderr)
	}
	if !gone(grandchild)() {
		t.Errorf("the command's background job %d outlives the lock", grandchild)
	}
	if held(t, newRDB(t), key)() {
		t.Errorf("lock left behind")
	}
}

// TestRunCommandReadsTerminal checks that a command run from a terminal's
// foreground job can read the terminal (its process group is given the
// terminal, so it is not stopped by SIGTTIN).
func TestRunCommandReadsTerminal(t *testing.T) {
	key := dlocktest.Key(t)
	ready := filepath.Join(t.TempDir(), "ready")
	cmd := dlockCmd(t, "run", key, "--", "sh", "-c", `echo ok > "$1"; read line; echo "got $line" >&2`, "sh", ready)
	term := ptyStart(t, cmd, withControllingTerminal)
	waitFor(t, "the command to start", fileHas(ready, "ok"))
	term.write("hello\n")
	term.waitFor("got hello")
	term.finish()
	if code := childCode(cmd.ProcessState); code != 0 {
		t.Errorf("exit %d; terminal: %q", code, term.text())
	}
}

// TestFlagsAfterArguments checks that every command takes its flags after its
// arguments too.
func TestFlagsAfterArguments(t *testing.T) {
	key := dlocktest.Key(t)
	r := dlockRun(t, "status", key, "--json")
	var li lockInfo
	if err := json.Unmarshal([]byte(r.stdout), &li); r.code != exitFailure || err != nil || li.Key != key {
		t.Errorf("status KEY --json: exit %d %v stdout %q stderr %q", r.code, err, r.stdout, r.stderr)
	}
	if r := dlockRun(t, "list", key+"*", "--json"); r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("list PATTERN --json: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := dlockRun(t, "unlock", key, "--force"); r.code != exitFailure || !strings.Contains(r.stderr, "not held") {
		t.Errorf("unlock KEY --force: exit %d stderr %q", r.code, r.stderr)
	}
	if r := dlockRun(t, "run", key, "--wait", "0", "--", "sh", "-c", "echo $DLOCK_KEY"); r.code != 0 || r.stdout != key+"\n" {
		t.Errorf("run KEY --wait 0 -- ...: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := dlockRun(t, "completion", "bash", "--help"); r.code != 0 || !strings.Contains(r.stdout, "usage:") {
		t.Errorf("completion bash --help: exit %d stderr %q", r.code, r.stderr)
	}
}

// TestDemoDeletesItsKeys runs the demo on a real server and checks that it
// leaves no key behind.
func TestDemoDeletesItsKeys(t *testing.T) {
	r := dlockRun(t, "demo", "--redis", redisURL(), "--workers", "2", "--rounds", "3", "--stock", "3")
	if r.code != 0 {
		t.Fatalf("demo: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	keys, err := newRDB(t).Keys(context.Background(), "*dlock-demo*").Result()
	if err != nil || len(keys) != 0 {
		t.Errorf("demo left keys behind: %v %v", keys, err)
	}
	if strings.Contains(r.stdout, "seed") {
		t.Errorf("demo output speaks of seeds:\n%s", r.stdout)
	}
	// The optimistic sale sells the whole stock and nothing more.
	if f := strings.Fields(lineWith(r.stdout, "optimistic ")); len(f) < 4 || f[1] != "3" || f[2] != "0" || f[3] != "0" {
		t.Errorf("optimistic sale: %q\n%s", f, r.stdout)
	}
}

// lineWith returns the first line of s that starts with prefix after its
// indentation, or "".
func lineWith(s, prefix string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), prefix) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// TestDemoErrorOnOneLine runs the demo as a user that may not run scripts:
// every worker's Lock fails, and the demo says so on one line.
func TestDemoErrorOnOneLine(t *testing.T) {
	guarded := testserver.StartRedis(t)
	admin := redis.NewClient(&redis.Options{Addr: guarded.Addr})
	err := admin.Do(context.Background(), "ACL", "SETUSER", "demo", "on", ">pw", "~*", "&*", "+@all", "-@scripting").Err()
	admin.Close()
	if err != nil {
		t.Fatal(err)
	}
	r := dlockRun(t, "demo", "--redis", "redis://demo:pw@"+guarded.Addr+"/0", "--workers", "4", "--rounds", "2", "--stock", "2")
	if r.code == 0 || !strings.Contains(r.stderr, "NOPERM") || !strings.Contains(r.stderr, "3 more workers failed") {
		t.Errorf("demo without script permission: exit %d stderr %q", r.code, r.stderr)
	}
	checkOneLine(t, r)
}

func TestVersion(t *testing.T) {
	r := dlockRun(t, "version")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "dlock ") || !strings.Contains(r.stdout, runtime.Version()) || strings.Count(r.stdout, "\n") != 1 {
		t.Errorf("dlock version: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	// Built from a checkout: the release the checkout leads to.
	if !strings.HasPrefix(r.stdout, "dlock "+devVersion()+" (commit ") {
		t.Errorf("dlock version of a build from a checkout: %q", r.stdout)
	}
	if r2 := dlockRun(t, "--version"); r2.code != 0 || r2.stdout != r.stdout {
		t.Errorf("dlock --version: exit %d %q, want %q", r2.code, r2.stdout, r.stdout)
	}
	if r := dlockRun(t, "version", "x"); r.code != exitUsage {
		t.Errorf("dlock version x: exit %d", r.code)
	}
}

// TestWaitingLineFitsTerminal checks that the waiting line, redrawn in place,
// is narrower than the terminal, so that it never wraps into a trail of lines,
// and that it shows the holder's description however long the key.
func TestWaitingLineFitsTerminal(t *testing.T) {
	for _, tc := range []struct {
		name, suffix, desc string
		shown              bool // the whole description fits
	}{
		{"long description", "", strings.Repeat("a long description ", 8), false},
		{"long key", ":with-a-rather-long-name", "nightly report v42", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := dlocktest.Key(t) + tc.suffix
			holder, _, _ := startHolder(t, []string{"--description", tc.desc}, key, `echo ok > "$1"; exec sleep 30`)
			defer func() { _ = holder.Process.Kill() }()
			cmd := dlockCmd(t, "run", "--wait", "1500ms", key, "--", "true")
			term := ptyStart(t, cmd, 0)
			term.finish()
			out := term.text()
			lines, shown := 0, 0
			for _, line := range strings.Split(out, "\r\x1b[K") {
				if !strings.HasPrefix(line, "dlock: waiting") {
					continue
				}
				lines++
				if n := utf8.RuneCountInString(line); n >= ptyColumns {
					t.Errorf("a waiting line of %d columns on a terminal of %d: %q", n, ptyColumns, line)
				}
				if strings.Contains(line, strconv.Quote(tc.desc)) {
					shown++
				}
			}
			if lines == 0 {
				t.Errorf("no waiting line: %q", out)
			}
			if tc.shown && shown == 0 {
				t.Errorf("no waiting line shows the description %q: %q", tc.desc, out)
			}
		})
	}
}

// TestRunServerLostWhileWaitingExits69 cuts a waiting run off its server: the
// wait ends with exit 69 (server unavailable), not 75 (busy).
func TestRunServerLostWhileWaitingExits69(t *testing.T) {
	key := dlocktest.Key(t)
	holder, _, _ := startHolder(t, []string{"--ttl", "1s"}, key, `echo ok > "$1"; exec sleep 30`)
	defer func() { _ = holder.Process.Kill() }()
	proxy := testproxy.Start(t, srv.Addr)
	cmd := dlockCmd(t, "run", "--redis", "redis://"+proxy.Addr+"/0", "--wait", "20s", key, "--", "true")
	term := ptyStart(t, cmd, 0)
	term.waitFor("waiting")
	proxy.Close()
	term.finish()
	if code := childCode(cmd.ProcessState); code != exitUnavailable {
		t.Errorf("exit %d, want %d; stderr %q", code, exitUnavailable, term.text())
	}
	out := term.text()
	last := out[strings.LastIndex(out, "\r\x1b[K")+len("\r\x1b[K"):]
	if !strings.HasPrefix(last, "dlock run: ") || !strings.Contains(last, "unavailable") || strings.Count(strings.TrimSpace(last), "\n") != 0 {
		t.Errorf("after the waiting line, stderr is not one line: %q", term.text())
	}
}

// TestRunServerRefusals: a server that refuses the lock's scripts (an ACL without
// EVALSHA) or is out of memory makes run exit 69 (unavailable) with one line,
// and a run that waits through an out-of-memory spell gets the lock.
func TestRunServerRefusals(t *testing.T) {
	s := testserver.StartRedis(t)
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: s.Addr})
	t.Cleanup(func() { _ = admin.Close() })
	if err := admin.Do(ctx, "ACL", "SETUSER", "noeval", "on", ">pw", "~*", "&*", "+@all", "-eval", "-evalsha").Err(); err != nil {
		t.Fatal(err)
	}
	r := dlockRun(t, "run", "--redis", "redis://noeval:pw@"+s.Addr+"/0", "--wait", "5s", "k", "--", "true")
	if r.code != exitUnavailable || !strings.Contains(r.stderr, "NOPERM") {
		t.Errorf("NOPERM: exit %d, stderr %q; want 69 naming NOPERM", r.code, r.stderr)
	}
	checkOneLine(t, r)
	if r.elapsed > 4*time.Second {
		t.Errorf("NOPERM reported after %v: a refusal is not waited out", r.elapsed)
	}
	if err := admin.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	r = dlockRun(t, "run", "--redis", "redis://"+s.Addr+"/0", "--wait", "500ms", "k", "--", "true")
	if r.code != exitUnavailable || !strings.Contains(r.stderr, "OOM") {
		t.Errorf("OOM: exit %d, stderr %q; want 69 naming OOM", r.code, r.stderr)
	}
	if r.elapsed < 500*time.Millisecond {
		t.Errorf("OOM reported after %v, before the wait of 500ms ended", r.elapsed)
	}
	// What it waited for, then the error on one line.
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	for _, l := range lines[:len(lines)-1] {
		if !strings.HasPrefix(l, "dlock run: waiting") {
			t.Errorf("OOM: stderr has more than waiting lines and the error: %q", r.stderr)
		}
	}
	r.stderr = lines[len(lines)-1] + "\n"
	checkOneLine(t, r)
}

// TestConsensusBackends: run, status, list and unlock --force on etcd (--etcd),
// ZooKeeper (--zk) and PostgreSQL (--postgres), also with the server from the
// environment, with the same exit codes as on Redis.
func TestConsensusBackends(t *testing.T) {
	etcd := testserver.StartEtcd(t)
	zk := testserver.StartZooKeeper(t)
	pg := testserver.StartPostgres(t)
	for _, b := range []struct{ name, flag, addr, env string }{
		{"etcd", "--etcd", etcd.ClientURL, "DLOCK_ETCD"},
		{"zk", "--zk", zk.Addr, "DLOCK_ZK"},
		{"postgres", "--postgres", pg.URL, "DLOCK_POSTGRES"},
	} {
		t.Run(b.name, func(t *testing.T) {
			key := dlocktest.Key(t)
			r := dlockRun(t, "run", b.flag, b.addr, key, "--", "sh", "-c", `test -n "$DLOCK_TOKEN" && echo "$DLOCK_KEY"`)
			if r.code != 0 || strings.TrimSpace(r.stdout) != key {
				t.Fatalf("run: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
			}
			holder, stderr, _ := startHolder(t, []string{b.flag, b.addr, "--ttl", "3s", "--description", "on " + b.name}, key, `echo ok > "$1"; exec sleep 30`)
			r = dlockRun(t, "status", b.flag, b.addr, key)
			if r.code != 0 || !strings.Contains(r.stdout, "held") || !strings.Contains(r.stdout, "on "+b.name) {
				t.Errorf("status of a held lock: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			r = dlockRun(t, "list", b.flag, b.addr, "--names", key[:len(key)-4]+"*")
			if r.stdout != key+"\n" {
				t.Errorf("list --names: %q %s", r.stdout, r.stderr)
			}
			r = dlockRun(t, "run", b.flag, b.addr, "--wait", "0", key, "--", "true")
			if r.code != exitNotObtained {
				t.Errorf("run --wait 0 on a held lock: exit %d, want %d; %s", r.code, exitNotObtained, r.stderr)
			}
			cmd := dlockCmd(t, "unlock", "--force", key)
			cmd.Env = append(cmd.Env, b.env+"="+b.addr)
			for i, kv := range cmd.Env { // the server comes from b.env, not DLOCK_REDIS
				if strings.HasPrefix(kv, "DLOCK_REDIS=") {
					cmd.Env[i] = "DLOCK_REDIS="
				}
			}
			if r = runCmd(t, cmd); r.code != 0 {
				t.Errorf("unlock --force: exit %d; %s", r.code, r.stderr)
			}
			done := make(chan error, 1)
			go func() { done <- holder.Wait() }()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("the holder did not notice the forced unlock")
			}
			if code := holder.ProcessState.ExitCode(); code != exitLockLost {
				t.Errorf("holder after unlock --force: exit %d, want %d; %s", code, exitLockLost, stderr)
			}
			r = dlockRun(t, "status", b.flag, b.addr, key)
			if r.code != exitFailure {
				t.Errorf("status of a free lock: exit %d, want %d", r.code, exitFailure)
			}
			if r = dlockRun(t, "run", b.flag, "127.0.0.1:1", key, "--", "true"); r.code != exitUnavailable {
				t.Errorf("run on a closed port: exit %d, want %d; %s", r.code, exitUnavailable, r.stderr)
			}
			if b.name == "postgres" {
				if r = dlockRun(t, "run", b.flag, b.addr, "-s", key, "--", "true"); r.code != exitUsage || !strings.Contains(r.stderr, "no read-write lock") {
					t.Errorf("run -s on PostgreSQL: exit %d, want %d; %s", r.code, exitUsage, r.stderr)
				}
			}
		})
	}
}
