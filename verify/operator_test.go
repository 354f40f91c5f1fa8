package verify

import (
	"testing"
	"time"
)

// TestPropertiesOfEmptyHistory checks that a run that recorded nothing (its
// workers never started) is reported, not a crash.
func TestPropertiesOfEmptyHistory(t *testing.T) {
	ps, a := Properties(nil, Params{Kind: "plain", TTL: time.Second})
	if len(ps) == 0 || a.Stats.Grants != 0 {
		t.Fatalf("%v %+v", ps, a.Stats)
	}
	for _, p := range ps {
		if p.Violation != nil {
			t.Errorf("%s: %v", p.Name, p.Violation.Msg)
		}
	}
}

// TestPropertiesJudgeTheLeftover checks that what a run left on the store is
// judged by the liveness checker among the properties, as the suite's own
// runs are.
func TestPropertiesJudgeTheLeftover(t *testing.T) {
	ps, _ := Properties(nil, Params{Kind: "plain", TTL: time.Second, Leftover: []string{"run0"}})
	for _, p := range ps {
		if p.Name == "liveness" {
			if p.Violation == nil || p.Violation.Checker != "liveness" {
				t.Fatalf("liveness: %+v, want a violation naming run0", p.Violation)
			}
			return
		}
	}
	t.Fatal("no liveness property")
}
