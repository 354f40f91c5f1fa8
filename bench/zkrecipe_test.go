package main

import (
	"testing"
	"time"
)

// TestZKRecipeQuick runs scenarios a and bc, quick, with zklock and
// go-zookeeper's recipe side by side: both measured, nothing lost or
// overlapping, and an uncontended cycle three requests for both (a create,
// a read of the queue, a delete; pings and the lock nodes made in the first
// cycles come on top in a short run).
func TestZKRecipeQuick(t *testing.T) {
	for _, m := range quickRuns(t, 2*time.Minute, []string{"a zk", "a zk/recipe", "bc zk", "bc zk/recipe"}, "-scenarios", "a,bc", "-variants", "zk,zk/recipe", "-b-g", "4") {
		if c := m.M["cmds_per_cycle_client"]; m.Scenario == "a" && (c < 3 || c > 3.5) {
			t.Errorf("a n=%d %s: %.2f requests per cycle, want 3", m.N, m.Variant, c)
		}
	}
}
