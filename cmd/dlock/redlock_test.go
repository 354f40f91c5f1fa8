package main

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// TestRedlockRunStatusListUnlock: three --redis URLs mean Redlock. dlock run
// holds the lock on a majority and passes its token; status, list and unlock
// show and act on every node; one master down changes nothing, two stop it.
func TestRedlockRunStatusListUnlock(t *testing.T) {
	b, c := testserver.StartRedis(t), testserver.StartRedis(t)
	flags := []string{"--redis", redisURL(), "--redis", "redis://" + b.Addr + "/0", "--redis", "redis://" + c.Addr + "/0"}
	with := func(cmd string, args ...string) []string {
		return append(append([]string{cmd}, flags...), args...)
	}
	key := dlocktest.Key(t)
	r := dlockRun(t, with("run", key, "--", "sh", "-c", `echo "$DLOCK_KEY $DLOCK_TOKEN"`)...)
	fields := strings.Fields(r.stdout)
	if r.code != 0 || len(fields) != 2 || fields[0] != key {
		t.Fatalf("run: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	if tok, err := strconv.ParseUint(fields[1], 10, 64); err != nil || tok == 0 {
		t.Fatalf("run passed token %q", fields[1])
	}

	holder, _, _ := startHolder(t, append(flags, "--description", "redlock job"), key, `echo ok > "$1"; exec sleep 30`)
	defer func() { _ = holder.Process.Kill() }()
	r = dlockRun(t, with("status", key)...)
	if r.code != 0 || !strings.Contains(r.stdout, "held") || !strings.Contains(r.stdout, "redlock job") {
		t.Errorf("status: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	r = dlockRun(t, with("list", "--names", key[:len(key)-2]+"*")...)
	if r.stdout != key+"\n" {
		t.Errorf("list --names: %q (stderr %q)", r.stdout, r.stderr)
	}
	// A Redlock lock needs only a majority: under load the third node's grant
	// can come after the holder started, or not at all. Stop a node whose loss
	// leaves a majority holding the lock: one that does not hold it, if any.
	lockKey := redislock.LockKey(key)
	rdbs := map[string]*redis.Client{}
	for _, addr := range []string{srv.Addr, b.Addr, c.Addr} {
		rdbs[addr] = testserver.RedisClient(t, addr)
	}
	holds := func(addr string) bool {
		return rdbs[addr].Exists(context.Background(), lockKey).Val() == 1
	}
	testserver.Eventually(t, 10*time.Second, "a majority holding the lock", func() bool {
		return holds(srv.Addr) && (holds(b.Addr) || holds(c.Addr))
	})
	first, second := c, b
	if !holds(b.Addr) {
		first, second = b, c
	}
	first.Stop() // a minority down: still served
	r = dlockRun(t, with("run", "--wait", "0", key, "--", "true")...)
	if r.code != exitNotObtained {
		t.Errorf("run on a held lock with one master down: exit %d stderr %q", r.code, r.stderr)
	}
	r = dlockRun(t, with("unlock", "--force", key)...)
	if r.code != 0 || !strings.Contains(r.stdout, "redlock job") {
		t.Errorf("unlock --force: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	second.Stop() // a majority down
	r = dlockRun(t, with("run", key, "--", "true")...)
	if r.code != exitUnavailable || !strings.Contains(r.stderr, "Redlock needs 2 of 3") {
		t.Errorf("run with two of three masters down: exit %d stderr %q", r.code, r.stderr)
	}
}

// TestRedlockWarnsOfAMasterDown: a run over three masters of which one cannot
// be reached works, and says on stderr that it has no failure tolerance left.
func TestRedlockWarnsOfAMasterDown(t *testing.T) {
	b := testserver.StartRedis(t)
	port, err := testserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	down := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	key := dlocktest.Key(t)
	r := dlockRun(t, "run", "--redis", redisURL(), "--redis", "redis://"+b.Addr+"/0", "--redis", "redis://"+down+"/0", key, "--", "true")
	t.Logf("stderr: %s", r.stderr)
	if r.code != 0 {
		t.Fatalf("run with one of three masters down: exit %d stderr %q", r.code, r.stderr)
	}
	for _, want := range []string{"warning", down, "1 of 3", "no failure tolerance left"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q", want)
		}
	}
	c := testserver.StartRedis(t)
	r = dlockRun(t, "run", "--redis", redisURL(), "--redis", "redis://"+b.Addr+"/0", "--redis", "redis://"+c.Addr+"/0", key, "--", "true")
	if r.code != 0 || r.stderr != "" {
		t.Errorf("run with every master up: exit %d stderr %q", r.code, r.stderr)
	}
}
