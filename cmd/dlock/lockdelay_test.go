package main

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/dlocktest"
)

// TestRunLockDelay checks --lock-delay: a run killed without releasing keeps
// its key from everybody for the delay after its lease ran out, which status
// and list show; a forced unlock starts the delay; a normal end does not.
func TestRunLockDelay(t *testing.T) {
	const delay = 1500 * time.Millisecond
	flags := []string{"--ttl", "500ms", "--lock-delay", delay.String()}

	t.Run("crash", func(t *testing.T) {
		key := dlocktest.Key(t)
		holder, _, _ := startHolder(t, flags, key, `echo ok > "$1"; exec sleep 30`)
		killed := time.Now()
		_ = syscall.Kill(-holder.Process.Pid, syscall.SIGKILL) // dlock and its command, as a lost host
		_ = holder.Process.Kill()
		_ = holder.Wait()
		// Nobody gets the key before the lease has run out and the delay
		// after it: at least the delay after the kill.
		r := dlockRun(t, "run", "--wait", "20s", key, "--", "true")
		if got := time.Since(killed); r.code != 0 || got < delay {
			t.Errorf("run after a killed holder with a %v lock-delay: exit %d after %v; stderr %q", delay, r.code, got, r.stderr)
		}
	})

	t.Run("forced", func(t *testing.T) {
		key := dlocktest.Key(t)
		holder, _, _ := startHolder(t, flags, key, `echo ok > "$1"; exec sleep 30`)
		defer func() { _ = holder.Process.Kill() }()
		forced := time.Now()
		if r := dlockRun(t, "unlock", "--force", key); r.code != 0 {
			t.Fatalf("unlock --force: exit %d, stderr %q", r.code, r.stderr)
		}
		r := dlockRun(t, "status", key)
		if r.code != exitFailure || !strings.Contains(r.stdout, "lock-delay until") {
			t.Errorf("status in the lock-delay: exit %d\n%s", r.code, r.stdout)
		}
		r = dlockRun(t, "status", "--json", key)
		var st lockInfo
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || st.Held || st.DelayMS <= 0 || st.DelayMS > delay.Milliseconds() || st.DelayTo == nil {
			t.Errorf("status --json in the lock-delay: %v %+v", err, st)
		}
		r = dlockRun(t, "list", key)
		if !strings.Contains(r.stdout, "lock-delay") || !strings.Contains(r.stdout, " mutex ") {
			t.Errorf("list in the lock-delay, want the kind mutex:\n%s", r.stdout)
		}
		if r := dlockRun(t, "run", "--wait", "0", key, "--", "true"); r.code != exitNotObtained ||
			!strings.Contains(r.stderr, "is in its lock-delay until ") || strings.Contains(r.stderr, "held by") {
			t.Errorf("run --wait 0 in the lock-delay: exit %d, want %d saying it is in its lock-delay, until when; stderr %q", r.code, exitNotObtained, r.stderr)
		}
		r = dlockRun(t, "run", "--wait", "20s", key, "--", "true")
		if got := time.Since(forced); r.code != 0 || got < delay {
			t.Errorf("run after a forced unlock with a %v lock-delay: exit %d after %v; stderr %q", delay, r.code, got, r.stderr)
		}
	})

	t.Run("clean end", func(t *testing.T) {
		key := dlocktest.Key(t)
		if r := dlockRun(t, append(append([]string{"run"}, flags...), key, "--", "true")...); r.code != 0 {
			t.Fatalf("run: exit %d, stderr %q", r.code, r.stderr)
		}
		if r := dlockRun(t, "run", "--wait", "0", key, "--", "true"); r.code != 0 {
			t.Errorf("run --wait 0 after a run that released: exit %d, stderr %q", r.code, r.stderr)
		}
	})

	t.Run("bad", func(t *testing.T) {
		key := dlocktest.Key(t)
		for _, args := range [][]string{
			{"--lock-delay", "-1s"},
			{"--lock-delay", "2h"},
			{"--lock-delay", "1.5ms"},
			{"--lock-delay", "1s", "-n", "2"},
			{"--lock-delay", "1s", "--fair"},
		} {
			if r := dlockRun(t, append(append([]string{"run"}, args...), key, "--", "true")...); r.code != exitUsage {
				t.Errorf("run %v: exit %d, want %d; stderr %q", args, r.code, exitUsage, r.stderr)
			}
		}
	})
}
