package main

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// TestZKRecipeQuick runs scenarios a and bc, quick, with zklock and
// go-zookeeper's recipe side by side: both measured, nothing lost or
// overlapping, and an uncontended cycle three requests for both (a create,
// a read of the queue, a delete; pings and the lock nodes made in the first
// cycles come on top in a short run).
func TestZKRecipeQuick(t *testing.T) {
	cfg, err := parseFlags([]string{"-quick", "-scenarios", "a,bc", "-variants", "zk,zk/recipe", "-b-g", "4"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
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
		if c := m.M["cmds_per_cycle_client"]; m.Scenario == "a" && (c < 3 || c > 3.5) {
			t.Errorf("a n=%d %s: %.2f requests per cycle, want 3", m.N, m.Variant, c)
		}
	}
	for _, s := range []string{"a zk", "a zk/recipe", "bc zk", "bc zk/recipe"} {
		if !seen[s] {
			t.Errorf("%s: no measurement\n%s", s, progress.String())
		}
	}
}
