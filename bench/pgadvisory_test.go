package main

import (
	"testing"
	"time"
)

// TestPGAdvisoryQuick runs scenarios a and bc, quick, with pglock (logged and
// unlogged) and PostgreSQL's advisory lock side by side: all measured,
// nothing lost or overlapping, and an uncontended cycle two statements for
// each (a key's first lock inserts its row: a few more in a short run).
func TestPGAdvisoryQuick(t *testing.T) {
	for _, m := range quickRuns(t, 3*time.Minute, []string{"a pg", "a pg/unlogged", "a pg/advisory", "bc pg", "bc pg/unlogged", "bc pg/advisory"}, "-scenarios", "a,bc", "-variants", "pg,pg/unlogged,pg/advisory", "-a-g", "1,4", "-b-g", "4") {
		if c := m.M["cmds_per_cycle_client"]; m.Scenario == "a" && (c < 2 || c > 2.1) {
			t.Errorf("a n=%d %s: %.2f statements per cycle, want 2", m.N, m.Variant, c)
		}
	}
}
