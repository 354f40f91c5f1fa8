package main

import (
	"testing"
	"time"
)

// TestPGLeaseQuick runs scenarios a and bc, quick, with pglock and the
// hand-written lease table side by side: both measured, nothing lost or
// overlapping, and the lease table's uncontended cycle two statements (an
// UPDATE to take, one to release; a key's first lock inserts its row;
// TestPGAdvisoryQuick counts pglock's).
func TestPGLeaseQuick(t *testing.T) {
	for _, m := range quickRuns(t, 3*time.Minute, []string{"a pg", "a pg/lease", "bc pg", "bc pg/lease"}, "-scenarios", "a,bc", "-variants", "pg,pg/lease", "-a-g", "1,4", "-b-g", "4") {
		if c := m.M["cmds_per_cycle_client"]; m.Scenario == "a" && m.Variant == "pg/lease" && (c < 2 || c > 2.1) {
			t.Errorf("a n=%d %s: %.2f statements per cycle, want 2", m.N, m.Variant, c)
		}
	}
}
