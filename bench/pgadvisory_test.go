package main

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// TestPGAdvisoryQuick runs scenarios a and bc, quick, with pglock (logged and
// unlogged) and PostgreSQL's advisory lock side by side: all measured,
// nothing lost or overlapping, and an uncontended cycle two statements for
// each (a key's first lock inserts its row: a few more in a short run).
func TestPGAdvisoryQuick(t *testing.T) {
	cfg, err := parseFlags([]string{"-quick", "-scenarios", "a,bc", "-variants", "pg,pg/unlogged,pg/advisory", "-a-g", "1,4", "-b-g", "4"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var tables, lines, progress bytes.Buffer
	ms, err := run(ctx, cfg, &tables, &lines, &progress)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, progress.String())
	}
	seen := map[string]bool{}
	for _, m := range ms {
		if m.Kind != "run" {
			continue
		}
		seen[m.Scenario+" "+m.Variant] = true
		for _, f := range []string{"lost", "overlaps", "errors"} {
			if v := m.M[f]; v != 0 {
				t.Errorf("%s n=%d %s: %s = %v", m.Scenario, m.N, m.Variant, f, v)
			}
		}
		if c := m.M["cmds_per_cycle_client"]; m.Scenario == "a" && (c < 2 || c > 2.1) {
			t.Errorf("a n=%d %s: %.2f statements per cycle, want 2", m.N, m.Variant, c)
		}
	}
	for _, s := range []string{"a pg", "a pg/unlogged", "a pg/advisory", "bc pg", "bc pg/unlogged", "bc pg/advisory"} {
		if !seen[s] {
			t.Errorf("%s: no measurement\n%s", s, progress.String())
		}
	}
}
