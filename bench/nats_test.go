package main

import (
	"testing"
	"time"
)

// TestNATSQuick runs scenarios a and bc, quick, with natslock's mutex and
// fair lock and the hand-written KV recipe side by side: all measured,
// nothing lost or overlapping, an uncontended natslock cycle two requests (a
// create and a delete marker, after the first cycle's watch and bucket
// look-ups; the fair lock's entry and its release) and the recipe's four
// (its Create after a deletion is three), and a contended critical section
// of the fair lock about two requests whatever waits (the grant writes
// nothing, and wakes the next entry's process only).
func TestNATSQuick(t *testing.T) {
	runs := []string{"a nats", "a nats/fair", "a nats/recipe", "bc nats", "bc nats/fair", "bc nats/recipe"}
	for _, m := range quickRuns(t, 3*time.Minute, runs, "-scenarios", "a,bc", "-variants", "nats,nats/fair,nats/recipe", "-a-g", "1", "-b-g", "4") {
		want := map[string]float64{"nats": 2, "nats/fair": 2, "nats/recipe": 4}[m.Variant]
		if c := m.M["cmds_per_cycle_server"]; m.Scenario == "a" && (c < want-0.1 || c > want+0.1) {
			t.Errorf("a n=%d %s: %.2f requests per cycle, want %v", m.N, m.Variant, c, want)
		}
		if c := m.M["cmds_per_cs_server"]; m.Scenario == "bc" && m.Variant == "nats/fair" && c > 2.5 {
			t.Errorf("bc n=%d %s: %.2f requests per critical section, want about 2", m.N, m.Variant, c)
		}
	}
}
