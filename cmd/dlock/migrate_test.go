package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/dlocktest"
)

// migrateScript stands in for a migration tool's "up" (docs/migrations.md): it
// reads the schema version from the state file $1, applies the migrations up to
// 3 not yet applied (each a line "apply N PID" in the log $2, slow enough for a
// second deploy to arrive meanwhile), and otherwise logs "noop PID saw N" and
// prints "no change". With MIGRATE_FAIL=N set it fails at migration N, exit 1.
const migrateScript = `state=$1; log=$2
cur=$(cat "$state" 2>/dev/null || echo 0)
if [ "$cur" -ge 3 ]; then echo "noop $$ saw $cur" >> "$log"; echo "no change"; exit 0; fi
i=$((cur + 1))
while [ "$i" -le 3 ]; do
	if [ "$i" = "${MIGRATE_FAIL:-}" ]; then echo "migration $i failed" >&2; exit 1; fi
	echo "apply $i $$" >> "$log"
	sleep 0.15
	echo "$i" > "$state"
	i=$((i + 1))
done
echo "migrated to 3"`

// migrateCmd is "dlock run --wait 10m KEY -- sh -c migrateScript state log".
func migrateCmd(t *testing.T, key, state, log string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := dlockCmd(t, "run", "--wait", "10m", "--ttl", "5s", key, "--", "sh", "-c", migrateScript, "migrate", state, log)
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

// Two deploys start the migrations at once: they run one after the other, and
// the second sees the schema the first left, so it applies nothing.
func TestMigrationsRunOnceAcrossConcurrentDeploys(t *testing.T) {
	key := dlocktest.Key(t)
	dir := t.TempDir()
	state, log := filepath.Join(dir, "state"), filepath.Join(dir, "log")
	type started struct {
		cmd            *exec.Cmd
		at             time.Time
		stdout, stderr *bytes.Buffer
	}
	var runs []started
	for range 2 {
		s := started{cmd: migrateCmd(t, key, state, log), stdout: new(bytes.Buffer), stderr: new(bytes.Buffer)}
		s.cmd.Stdout, s.cmd.Stderr = s.stdout, s.stderr
		s.at = time.Now()
		if err := s.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, s)
	}
	var outs []string
	for _, s := range runs {
		r := wait(t, s.cmd, s.at, s.stdout, s.stderr)
		if r.code != 0 {
			t.Fatalf("deploy exit %d, want 0; stderr %q", r.code, r.stderr)
		}
		outs = append(outs, strings.TrimSpace(r.stdout))
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 4 {
		t.Fatalf("log has %d lines, want 3 applies and 1 noop:\n%s", len(lines), b)
	}
	var pid string
	for i, l := range lines[:3] {
		f := strings.Fields(l)
		if len(f) != 3 || f[0] != "apply" || f[1] != fmt.Sprint(i+1) || (pid != "" && f[2] != pid) {
			t.Fatalf("migrations not applied once, in order, by one deploy:\n%s", b)
		}
		pid = f[2]
	}
	if f := strings.Fields(lines[3]); len(f) != 4 || f[0] != "noop" || f[1] == pid || f[3] != "3" {
		t.Fatalf("the second deploy did not see the first one's schema:\n%s", b)
	}
	if !(outs[0] == "migrated to 3" && outs[1] == "no change" || outs[0] == "no change" && outs[1] == "migrated to 3") {
		t.Errorf("stdout of the deploys: %q", outs)
	}
}

// The exit codes the recipe relies on: a failed migration's status passes
// through and frees the lock (the next deploy resumes where it stopped); a
// deploy that cannot get the lock within --wait exits 75 without running.
func TestMigrationsExitCodes(t *testing.T) {
	key := dlocktest.Key(t)
	dir := t.TempDir()
	state, log := filepath.Join(dir, "state"), filepath.Join(dir, "log")

	r := runCmd(t, migrateCmd(t, key, state, log, "MIGRATE_FAIL=2"))
	if r.code != 1 || !strings.Contains(r.stderr, "migration 2 failed") {
		t.Fatalf("failed migration: exit %d, stderr %q; want 1 and the tool's message", r.code, r.stderr)
	}
	r = runCmd(t, migrateCmd(t, key, state, log))
	if r.code != 0 || strings.TrimSpace(r.stdout) != "migrated to 3" {
		t.Fatalf("deploy after the failure: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if b, _ := os.ReadFile(log); !strings.HasPrefix(string(b), "apply 1 ") || strings.Count(string(b), "apply 2 ") != 1 {
		t.Fatalf("the second deploy did not resume at migration 2:\n%s", b)
	}

	holder, _, _ := startHolder(t, nil, key, `echo ok > "$1"; exec sleep 30`)
	defer func() { _ = holder.Process.Kill() }()
	r = dlockRun(t, "run", "--wait", "300ms", key, "--", "sh", "-c", "echo ran")
	if r.code != exitNotObtained || r.stdout != "" {
		t.Fatalf("deploy while another migrates: exit %d, stdout %q; want %d and nothing run", r.code, r.stdout, exitNotObtained)
	}
}
