package main

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// TestNATSQuick runs scenarios a and bc, quick, with natslock and the
// hand-written KV recipe side by side: all measured, nothing lost or
// overlapping, an uncontended natslock cycle two requests (a create and a
// delete marker, after the first cycle's watch and bucket look-ups) and the
// recipe's four (its Create after a deletion is three).
func TestNATSQuick(t *testing.T) {
	cfg, err := parseFlags([]string{"-quick", "-scenarios", "a,bc", "-variants", "nats,nats/recipe", "-a-g", "1", "-b-g", "4"}, &bytes.Buffer{})
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
	want := map[string]float64{"nats": 2, "nats/recipe": 4}
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
		if c := m.M["cmds_per_cycle_server"]; m.Scenario == "a" && (c < want[m.Variant]-0.1 || c > want[m.Variant]+0.1) {
			t.Errorf("a n=%d %s: %.2f requests per cycle, want %v", m.N, m.Variant, c, want[m.Variant])
		}
	}
	for _, s := range []string{"a nats", "a nats/recipe", "bc nats", "bc nats/recipe"} {
		if !seen[s] {
			t.Errorf("%s: no measurement\n%s", s, progress.String())
		}
	}
}
