package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/redislock"
)

// readMetrics returns the JSON lines of a --metrics-file.
func readMetrics(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

func TestRunMetricsFile(t *testing.T) {
	key := dlocktest.Key(t)
	path := filepath.Join(t.TempDir(), "metrics.jsonl")

	// Held and released, renewed meanwhile.
	r := dlockRun(t, "run", "--metrics-file", path, "--ttl", "900ms", "--renew-every", "100ms", key, "--", "sh", "-c", "sleep 0.5; exit 3")
	if r.code != 3 {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	// Busy: another holder, no waiting.
	holder, _, _ := startHolder(t, nil, key, `echo ok >> "$1"; while :; do sleep 0.05; done`)
	r = dlockRun(t, "run", "--metrics-file", path, "--wait", "0", "-q", key, "--", "true")
	if r.code != exitNotObtained {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	_ = holder.Process.Kill()
	_, _ = holder.Process.Wait()

	lines := readMetrics(t, path)
	if len(lines) != 2 {
		t.Fatalf("%d lines, want one per run: %v", len(lines), lines)
	}
	held, busy := lines[0], lines[1]
	if held["key"] != key || held["outcome"] != "acquired" || held["end"] != "released" || held["exit_code"] != 3.0 ||
		held["backend"] != "redislock" || held["attempts"] != 1.0 {
		t.Errorf("held run: %v", held)
	}
	if h, _ := held["hold_seconds"].(float64); h < 0.4 || h > 10 {
		t.Errorf("held run: hold_seconds %v for a 0.5s command", held["hold_seconds"])
	}
	if n, _ := held["renewals"].(float64); n < 1 {
		t.Errorf("held run: no renewal counted: %v", held)
	}
	if busy["outcome"] != "busy" || busy["end"] != nil || busy["exit_code"] != float64(exitNotObtained) {
		t.Errorf("busy run: %v", busy)
	}
}

func TestRunMetricsFileLoss(t *testing.T) {
	key := dlocktest.Key(t)
	path := filepath.Join(t.TempDir(), "metrics.jsonl")
	rdb := newRDB(t)
	cmd, stderr, _ := startHolder(t, []string{"--metrics-file", path, "--ttl", "600ms", "--grace", "300ms"}, key,
		`trap 'exit 0' TERM; echo ok >> "$1"; while :; do sleep 0.02; done`)
	start := time.Now()
	if err := rdb.Del(context.Background(), redislock.LockKey(key)).Err(); err != nil {
		t.Fatal(err)
	}
	if r := wait(t, cmd, start, new(bytes.Buffer), stderr); r.code != exitLockLost {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	m := readMetrics(t, path)[0]
	// Told by its renewal (not held), or at once by the server's keyspace
	// notification of the DEL (a store signal) when the server sends them:
	// both are right, and which comes first is the scheduling's.
	cause := m["loss_cause"]
	if m["outcome"] != "acquired" || m["end"] != "lost" || cause != "not_held" && cause != "store_signal" || m["exit_code"] != float64(exitLockLost) {
		t.Errorf("lost run: %v", m)
	}
}
