package verify

import (
	"testing"
	"time"
)

// TestPropertiesOfEmptyHistory checks that a run that recorded nothing (its
// workers never started) is reported, not a crash.
func TestPropertiesOfEmptyHistory(t *testing.T) {
	ps, st := Properties(nil, "plain", time.Second, "")
	if len(ps) == 0 || st.Grants != 0 {
		t.Fatalf("%v %+v", ps, st)
	}
	for _, p := range ps {
		if p.Violation != nil {
			t.Errorf("%s: %v", p.Name, p.Violation.Msg)
		}
	}
}
