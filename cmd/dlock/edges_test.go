package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/redis/go-redis/v9"
)

// TestRunKeyStartingWithDash locks a key that starts with "-", written after a
// "--" and followed by another "--" before the command; status and unlock take
// it the same way.
func TestRunKeyStartingWithDash(t *testing.T) {
	key := "-" + dlocktest.Key(t)
	r := dlockRun(t, "run", "--", key, "--", "sh", "-c", `echo "$DLOCK_KEY"`)
	if r.code != 0 || r.stdout != key+"\n" {
		t.Fatalf("run -- %s -- cmd: exit %d stdout %q stderr %q", key, r.code, r.stdout, r.stderr)
	}
	r = dlockRun(t, "run", "--wait", "0", "--", key, "--", "true")
	if r.code != 0 {
		t.Errorf("run --wait 0 -- %s -- true: exit %d stderr %q", key, r.code, r.stderr)
	}
	holder, _, _ := startHolder(t, []string{"--"}, key, `echo ok > "$1"; exec sleep 30`)
	defer func() { _ = holder.Process.Kill() }()
	if r := dlockRun(t, "status", "--", key); r.code != 0 || !strings.Contains(r.stdout, "held") {
		t.Errorf("status -- %s: exit %d %q %q", key, r.code, r.stdout, r.stderr)
	}
	if r := dlockRun(t, "run", "--", key, "--"); r.code != exitUsage || !strings.Contains(r.stderr, "missing COMMAND") {
		t.Errorf("run -- KEY -- (no command): exit %d %q", r.code, r.stderr)
	}
}

// TestRunQuietAndVerbose: -q skips a busy lock without a word (errors are still
// printed), -v says when the lock is obtained and released.
func TestRunQuietAndVerbose(t *testing.T) {
	key := dlocktest.Key(t)
	r := dlockRun(t, "run", "-v", key, "--", "true")
	if r.code != 0 || !strings.Contains(r.stderr, "obtained") || !strings.Contains(r.stderr, "token") || !strings.Contains(r.stderr, "released") {
		t.Errorf("run -v: exit %d stderr %q", r.code, r.stderr)
	}
	holder, _, _ := startHolder(t, nil, key, `echo ok > "$1"; exec sleep 30`)
	defer func() { _ = holder.Process.Kill() }()
	for _, q := range []string{"-q", "--quiet"} {
		if r := dlockRun(t, "run", q, "--wait", "0", "-E", "0", key, "--", "true"); r.code != 0 || r.stderr != "" {
			t.Errorf("run %s --wait 0 -E 0 on a busy lock: exit %d stderr %q, want 0 and nothing", q, r.code, r.stderr)
		}
	}
	if r := dlockRun(t, "run", "-q", "--wait", "200ms", key, "--", "true"); r.code != exitNotObtained || r.stderr != "" {
		t.Errorf("run -q --wait 200ms on a busy lock: exit %d stderr %q", r.code, r.stderr)
	}
	port, err := testserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	r = dlockRun(t, "run", "-q", "--redis", fmt.Sprintf("redis://127.0.0.1:%d/0", port), key, "--", "true")
	if r.code != exitUnavailable || !strings.Contains(r.stderr, "cannot reach") {
		t.Errorf("run -q on a closed port: exit %d stderr %q, want 69 and the error", r.code, r.stderr)
	}
	if r := dlockRun(t, "run", "-q", "-v", key, "--", "true"); r.code != exitUsage {
		t.Errorf("run -q -v: exit %d", r.code)
	}
}

// outOfMemory starts a redis-server that answers but refuses every write: it is
// filled past its maxmemory, with noeviction.
func outOfMemory(t *testing.T) *testserver.Redis {
	t.Helper()
	s := testserver.StartRedis(t, "--maxmemory", "4mb", "--maxmemory-policy", "noeviction", "--enable-debug-command", "yes")
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer rdb.Close()
	if err := rdb.Do(context.Background(), "DEBUG", "POPULATE", 60000, "fill", 100).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(context.Background(), "probe", "x", 0).Err(); err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("the server still takes writes: %v", err)
	}
	return s
}

// TestRunSaysWhyServerFailsWhenNotTerminal: a run waiting on a server that
// refuses every attempt (out of memory) says so on stderr that is a pipe, with
// the server's reason, a line every few seconds at most.
func TestRunSaysWhyServerFailsWhenNotTerminal(t *testing.T) {
	s := outOfMemory(t)
	const wait = 7 * time.Second
	r := dlockRun(t, "run", "--redis", "redis://"+s.Addr+"/0", "--wait", wait.String(), dlocktest.Key(t), "--", "true")
	if r.code != exitUnavailable {
		t.Errorf("exit %d, want %d; stderr %q", r.code, exitUnavailable, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	waiting := 0
	for _, l := range lines {
		if strings.HasPrefix(l, "dlock run: waiting") {
			waiting++
			if !strings.HasPrefix(l, "dlock run: ") || !strings.Contains(l, "OOM") {
				t.Errorf("waiting line without the server's reason: %q", l)
			}
		}
	}
	if waiting == 0 || waiting > int(wait/failureEvery)+1 {
		t.Errorf("%d waiting lines in %v (one every %v at most, at least one):\n%s", waiting, wait, failureEvery, r.stderr)
	}
	if !strings.Contains(lines[len(lines)-1], "OOM") {
		t.Errorf("last line does not give the reason: %q", r.stderr)
	}
}

// TestServerErrorsPointTheWay: the help and the errors of a newcomer's first
// tries name every backend's flag and variable, suggest the URL form of a bare
// address, and report a ZooKeeper that is down on one line.
func TestServerErrorsPointTheWay(t *testing.T) {
	all := []string{"--redis", "--etcd", "--zk", "DLOCK_REDIS", "DLOCK_ETCD", "DLOCK_ZK"}
	r := dlockRun(t, "help")
	cmd := dlockCmd(t, "run", "k", "--", "true")
	cmd.Env = append(cmd.Env, "DLOCK_REDIS=")
	none := runCmd(t, cmd)
	for _, want := range all {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("dlock help does not name %s:\n%s", want, r.stdout)
		}
		if !strings.Contains(none.stderr, want) {
			t.Errorf("the no-server error does not name %s: %q", want, none.stderr)
		}
	}
	if none.code != exitUsage {
		t.Errorf("no server: exit %d", none.code)
	}
	r = dlockRun(t, "run", "--redis", "127.0.0.1:6379", "k", "--", "true")
	if r.code != exitUsage || !strings.Contains(r.stderr, "redis://127.0.0.1:6379") {
		t.Errorf("--redis 127.0.0.1:6379: exit %d stderr %q, want a suggestion of redis://127.0.0.1:6379", r.code, r.stderr)
	}
	checkOneLine(t, r)
	port, err := testserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	r = dlockRun(t, "run", "--zk", fmt.Sprintf("127.0.0.1:%d", port), "k", "--", "true")
	if r.code != exitUnavailable || strings.Contains(r.stderr, "log") || strings.Contains(r.stderr, "go-zookeeper") {
		t.Errorf("ZooKeeper down: exit %d stderr %q, want 69 and the reason without an aside", r.code, r.stderr)
	}
	checkOneLine(t, r)
}

// TestMalformedURLsKeepPasswords gives URLs with a password that do not parse,
// in every place a URL is taken: no piece of the password reaches stderr.
func TestMalformedURLsKeepPasswords(t *testing.T) {
	const pw = "Zq7kP"
	bad := []string{
		"redis://u:" + pw + "/x@h:1/0",
		"redis://u:" + pw + "%zz@h:1/0",
		"redis://u:" + pw + "#1@h:1/0",
		"redis://u:" + pw + "?1@h:1/0",
		"redis://u:" + pw + "%t@h:1/0",
		"redis://u:" + pw + " x@h/0",
		"redis://u:" + pw + "@h:abc/0",
		"redis://u:" + pw + "@[::1/0",
		"redis://u:" + pw + "@h:1/x",
		"u:" + pw + "@127.0.0.1:1",
		"redis://usr:" + pw + "/@h:1", // url.Parse reads the password as a port
	}
	for _, u := range bad {
		for _, args := range [][]string{
			{"run", "--redis", u, "k", "--", "true"},
			{"status", "--redis", u, "k"},
			{"demo", "--redis", u},
			{"run", "--redis", u, "--redis", u, "--redis", u, "k", "--", "true"},
			{"run", "--etcd", strings.Replace(u, "redis://", "http://", 1), "k", "--", "true"},
			{"run", "--zk", strings.Replace(u, "redis://", "zk://", 1), "k", "--", "true"},
		} {
			r := dlockRun(t, args...)
			for k := 0; k+3 <= len(pw); k++ {
				if strings.Contains(r.stderr, pw[k:k+3]) {
					t.Errorf("dlock %q: stderr shows %q of the password: %q", args, pw[k:k+3], r.stderr)
					break
				}
			}
			if r.code != exitUsage && r.code != exitUnavailable {
				t.Errorf("dlock %q: exit %d %q", args, r.code, r.stderr)
			}
		}
	}
}

// TestRunGivesUpOnFailingServer: a run without --wait on a server that refuses
// every attempt (out of memory) says why on stderr that is a pipe, and exits
// 69 once --fail-after has passed.
func TestRunGivesUpOnFailingServer(t *testing.T) {
	s := outOfMemory(t)
	const limit = 2 * time.Second
	r := dlockRun(t, "run", "--redis", "redis://"+s.Addr+"/0", "--fail-after", limit.String(), dlocktest.Key(t), "--", "true")
	if r.code != exitUnavailable || r.elapsed < limit || r.elapsed > limit+10*time.Second {
		t.Errorf("exit %d after %v, want %d after --fail-after %v; stderr %q", r.code, r.elapsed, exitUnavailable, limit, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	if len(lines) < 2 || !strings.HasPrefix(lines[0], "dlock run: waiting") || !strings.Contains(lines[0], "OOM") {
		t.Errorf("no waiting line naming the server's reason before the error: %q", r.stderr)
	}
	if last := lines[len(lines)-1]; !strings.Contains(last, "OOM") || strings.Contains(last, "waiting 0s") {
		t.Errorf("last line %q does not give the reason", last)
	}
	if r := dlockRun(t, "run", "--fail-after", "0", "k", "--", "true"); r.code != exitUsage {
		t.Errorf("--fail-after 0: exit %d", r.code)
	}
}
