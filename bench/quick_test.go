package main

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// quickRuns runs the bench, quick, with args for at most timeout, fails the
// test when a run lost an update, let two holders overlap or met errors, or
// when one of want ("scenario variant") was not measured, and returns the
// runs' measurements.
func quickRuns(t *testing.T, timeout time.Duration, want []string, args ...string) []measurement {
	t.Helper()
	cfg, err := parseFlags(append([]string{"-quick"}, args...), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var tables, lines, progress bytes.Buffer
	ms, err := run(ctx, cfg, &tables, &lines, &progress)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, progress.String())
	}
	seen := map[string]bool{}
	var runs []measurement
	for _, m := range ms {
		if m.Kind != "run" {
			continue
		}
		runs = append(runs, m)
		seen[m.Scenario+" "+m.Variant] = true
		for _, f := range []string{"lost", "overlaps", "errors"} {
			if v := m.M[f]; v != 0 {
				t.Errorf("%s n=%d %s: %s = %v", m.Scenario, m.N, m.Variant, f, v)
			}
		}
	}
	for _, s := range want {
		if !seen[s] {
			t.Errorf("%s: no measurement\n%s", s, progress.String())
		}
	}
	return runs
}
