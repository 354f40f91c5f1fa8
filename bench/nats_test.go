package main

import (
	"testing"
	"time"
)

// TestNATSQuick runs scenarios a and bc, quick, with natslock and the
// hand-written KV recipe side by side: all measured, nothing lost or
// overlapping, an uncontended natslock cycle two requests (a create and a
// delete marker, after the first cycle's watch and bucket look-ups) and the
// recipe's four (its Create after a deletion is three).
func TestNATSQuick(t *testing.T) {
	for _, m := range quickRuns(t, 3*time.Minute, []string{"a nats", "a nats/recipe", "bc nats", "bc nats/recipe"}, "-scenarios", "a,bc", "-variants", "nats,nats/recipe", "-a-g", "1", "-b-g", "4") {
		want := map[string]float64{"nats": 2, "nats/recipe": 4}[m.Variant]
		if c := m.M["cmds_per_cycle_server"]; m.Scenario == "a" && (c < want-0.1 || c > want+0.1) {
			t.Errorf("a n=%d %s: %.2f requests per cycle, want %v", m.N, m.Variant, c, want)
		}
	}
}
