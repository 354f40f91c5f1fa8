package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testserver"
)

// syncName is a latch or barrier name of this test run alone.
func syncName(t *testing.T) string {
	return strings.ReplaceAll(t.Name(), "/", ".") + "." + strconv.FormatInt(time.Now().UnixNano(), 36)
}

func TestLatchVerbs(t *testing.T) {
	name := syncName(t)
	if r := dlockRun(t, "latch", "count", "--count", "2", name); r.code != 0 || strings.TrimSpace(r.stdout) != "2" {
		t.Fatalf("count: %+v", r)
	}
	if r := dlockRun(t, "latch", "wait", "--count", "2", "--timeout", "200ms", name); r.code != exitNotObtained {
		t.Fatalf("wait with a timeout: %+v, want exit 75", r)
	}
	waiter := dlockCmd(t, "latch", "wait", "--count", "2", "--timeout", "25s", name)
	if err := waiter.Start(); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"1", "0", "0"} {
		if r := dlockRun(t, "latch", "count-down", "--count", "2", name); r.code != 0 || strings.TrimSpace(r.stdout) != want {
			t.Fatalf("count-down %d: %+v, want %s", i+1, r, want)
		}
	}
	if err := waiter.Wait(); err != nil {
		t.Fatalf("wait: %v", err)
	}
	if r := dlockRun(t, "latch", "count", "--count", "3", name); r.code != exitDataErr ||
		!strings.Contains(r.stderr, "was made with --count 2, not 3: every process gives the same --count 2") || strings.Contains(r.stderr, "not a dlock lock") {
		t.Fatalf("count with another N: %+v, want exit 65 naming both counts", r)
	}
	for _, args := range [][]string{
		{"latch", "wait", name},
		{"latch", "--count", "2", name},
		{"latch", "open", "--count", "2", name},
		{"latch", "wait", "--count", "2", "--timeout", "-1s", name},
		{"barrier", name},
		{"barrier", "--parties", "2"},
	} {
		if r := dlockRun(t, args...); r.code != exitUsage {
			t.Errorf("dlock %v: %+v, want exit 64", args, r)
		}
	}
}

// TestBarrierRunsCommandOnceAllArrived: the first party's command runs only
// after the second party started, and both exit with their command's status.
func TestBarrierRunsCommandOnceAllArrived(t *testing.T) {
	dir := t.TempDir()
	name := syncName(t)
	first := dlockCmd(t, "barrier", "--parties", "2", "--timeout", "25s", name, "--",
		"sh", "-c", "touch "+filepath.Join(dir, "first")+"; test -e "+filepath.Join(dir, "second-started"))
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "second-started"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := dlockRun(t, "barrier", "--parties", "2", "--timeout", "25s", name, "--", "sh", "-c", "exit 3"); r.code != 3 {
		t.Fatalf("second party: %+v, want its command's exit 3", r)
	}
	if err := first.Wait(); err != nil {
		t.Fatalf("first party: %v (its command ran before the second party came?)", err)
	}
	if r := dlockRun(t, "barrier", "--parties", "2", "--timeout", "300ms", name); r.code != exitNotObtained {
		t.Fatalf("a lone party: %+v, want exit 75", r)
	}
}

// TestBarrierKilledPartyLapses: a party SIGKILLed inside the barrier (a real
// process, with its command) stops counting after its TTL, and the other
// leaves then.
func TestBarrierKilledPartyLapses(t *testing.T) {
	dir := t.TempDir()
	name := syncName(t)
	inside := filepath.Join(dir, "inside")
	victim := dlockCmd(t, "barrier", "--parties", "2", "--ttl", "1s", name, "--", "sh", "-c", "touch "+inside+"; sleep 60")
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	survivor := dlockCmd(t, "barrier", "--parties", "2", "--ttl", "1s", "--timeout", "25s", name, "--", "true")
	var out strings.Builder
	survivor.Stderr = &out
	if err := survivor.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the victim's command runs inside the barrier", func() bool { _, err := os.Stat(inside); return err == nil })
	killed := time.Now()
	if err := syscall.Kill(-victim.Process.Pid, syscall.SIGKILL); err != nil { // dlock and its command
		t.Fatal(err)
	}
	_ = victim.Wait()
	if err := survivor.Wait(); err != nil {
		t.Fatalf("survivor: %v; %s", err, out.String())
	}
	if d := time.Since(killed); d > 10*time.Second {
		t.Fatalf("the survivor left %v after the kill, with a 1s TTL", d)
	}
}

// TestLatchAndBarrierOnEtcdAndPostgres runs the verbs on the other backends.
func TestLatchAndBarrierOnEtcdAndPostgres(t *testing.T) {
	etcd := testserver.StartEtcd(t)
	pg := testserver.StartPostgres(t)
	for _, b := range []struct{ flag, url string }{{"--etcd", etcd.ClientURL}, {"--postgres", pg.URL}} {
		t.Run(b.flag, func(t *testing.T) {
			name := syncName(t)
			if r := dlockRun(t, "latch", "count-down", b.flag, b.url, "--count", "1", name); r.code != 0 || strings.TrimSpace(r.stdout) != "0" {
				t.Fatalf("count-down: %+v", r)
			}
			if r := dlockRun(t, "latch", "wait", b.flag, b.url, "--count", "1", "--timeout", "10s", name); r.code != 0 {
				t.Fatalf("wait: %+v", r)
			}
			if r := dlockRun(t, "barrier", b.flag, b.url, "--parties", "1", "--timeout", "10s", name, "--", "true"); r.code != 0 {
				t.Fatalf("barrier: %+v", r)
			}
		})
	}
	zk := testserver.StartZooKeeper(t)
	if r := dlockRun(t, "latch", "count", "--zk", zk.Addr, "--count", "1", "x"); r.code != exitUsage || !strings.Contains(r.stderr, "need --redis") {
		t.Fatalf("latch on ZooKeeper: %+v, want exit 64", r)
	}
}
