package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/dlocktest"
)

// holdWith starts a run with flags on key whose command waits until the test
// ends, then stops it.
func holdWith(t *testing.T, key string, flags ...string) {
	t.Helper()
	holder, _, ready := startHolder(t, flags, key, `echo ok $$ > "$1"; exec sleep 30`)
	b, err := os.ReadFile(ready)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.Fields(string(b))[1])
	if err != nil {
		t.Fatalf("ready file %q: %v", b, err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(pid, syscall.SIGTERM)
		wait(t, holder, time.Now(), new(bytes.Buffer), new(bytes.Buffer))
	})
}

// TestRunSemaphoreAndShared: -n N lets N runs hold a key and no more; -s runs
// share a key while -x waits; status and list show permits and readers; a run
// of another kind or N is refused with 65 and says which flags take the key.
func TestRunSemaphoreAndShared(t *testing.T) {
	sem, rw := dlocktest.Key(t)+".sem", dlocktest.Key(t)+".rw"
	holdWith(t, sem, "-n", "2")
	holdWith(t, sem, "-n", "2")
	if r := dlockRun(t, "run", "-n", "2", "--wait", "0", sem, "--", "true"); r.code != exitNotObtained {
		t.Errorf("third run of -n 2: exit %d, stderr %q", r.code, r.stderr)
	}
	var li lockInfo
	r := dlockRun(t, "status", "--json", sem)
	if err := json.Unmarshal([]byte(r.stdout), &li); err != nil || li.Holders != 2 || li.Limit != 2 {
		t.Errorf("status --json of a full semaphore: %v\n%s", err, r.stdout)
	}
	if r := dlockRun(t, "status", sem); !strings.Contains(r.stdout, "2 of 2 (permits in use)") {
		t.Errorf("status of a full semaphore:\n%s", r.stdout)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-n", "3"}, "semaphore of 2 permits: take it with -n 2"},
		{nil, "semaphore of 2 permits"},
		{[]string{"-s"}, "semaphore of 2 permits"},
	} {
		args := append(append([]string{"run", "--wait", "0"}, tc.args...), sem, "--", "true")
		if r := dlockRun(t, args...); r.code != 65 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("run %v on a semaphore of 2: exit %d, stderr %q", tc.args, r.code, r.stderr)
		}
	}

	holdWith(t, rw, "-s")
	holdWith(t, rw, "--shared")
	if r := dlockRun(t, "run", "-x", "--wait", "0", rw, "--", "true"); r.code != exitNotObtained {
		t.Errorf("-x while two -s hold: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := dlockRun(t, "run", "-s", "--wait", "0", rw, "--", "true"); r.code != 0 {
		t.Errorf("a third -s: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := dlockRun(t, "run", "--wait", "0", rw, "--", "true"); r.code != 65 || !strings.Contains(r.stderr, "read-write lock: take it with -s") {
		t.Errorf("exclusive run on a read-write lock: exit %d, stderr %q", r.code, r.stderr)
	}
	r = dlockRun(t, "list", dlocktest.Key(t)[:20]+"*")
	if !strings.Contains(r.stdout, "HOLDERS") || !strings.Contains(r.stdout, "2 shared") || !strings.Contains(r.stdout, "2 of 2") {
		t.Errorf("list of a semaphore and a read lock:\n%s", r.stdout)
	}
}
