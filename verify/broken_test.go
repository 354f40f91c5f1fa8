package verify

import (
	"flag"
	"fmt"
	"slices"
	"testing"
	"time"
)

var controlFlag = flag.Bool("control", false, "TestBrokenVariantsAreCaught runs each variant's workloads without the variant: none may be caught")

// TestBrokenVariantsAreCaught runs each deliberately broken variant under each
// workload that exposes it: a checker that must catch it must, on every seed
// run (the quick run: seed 1; -seeds 8: seeds 1 to 8, the catch rate of
// docs/safety.md), and it logs when in the run it did. With -control, the
// same workloads without the variant must pass those checkers.
func TestBrokenVariantsAreCaught(t *testing.T) {
	for _, v := range variants {
		for _, e := range v.exposed {
			t.Run(e.name(v.name), func(t *testing.T) {
				var times []time.Duration
				missed := 0
				for _, seed := range seeds(1, 1) {
					c := exposureConfig(v, e, seed)
					if *controlFlag {
						c.Spec.Variant = ""
					}
					r := Run(t, c)
					i := slices.IndexFunc(r.Violations, func(vi Violation) bool { return slices.Contains(e.checkers, vi.Checker) })
					switch {
					case *controlFlag && i >= 0:
						t.Errorf("seed %d: the workload without the variant failed %s:\n%s", seed, r.Violations[i].Checker, r.Violations[i].Format(r.History))
					case *controlFlag:
					case i < 0:
						missed++
						t.Errorf("seed %d: variant %s not caught by %v (%s; Jain's index %.2f over %d grants)",
							seed, v.name, e.checkers, fmt.Sprint(checkers(r.Violations)), r.Stats.Jain, r.Stats.Grants)
					default:
						vi := r.Violations[i]
						at := catchTime(r.History, vi)
						times = append(times, at)
						t.Logf("seed %d: caught by %s %v into the run (%d operations, %d faults):\n%s",
							seed, vi.Checker, at.Round(100*time.Millisecond), r.Stats.Ops, r.Stats.Faults, vi.Format(r.History))
					}
				}
				if len(times) > 0 {
					slices.Sort(times)
					t.Logf("caught on %d of %d seeds; time to catch: median %v, at most %v", len(times), len(times)+missed,
						median(times).Round(100*time.Millisecond), times[len(times)-1].Round(100*time.Millisecond))
				}
			})
		}
	}
}

// catchTime is how long into the run (from its history's first event) the
// last event of v came; for a violation of the whole run (no events: the
// grants' spread), the run's last event.
func catchTime(h []Event, v Violation) time.Duration {
	if len(h) == 0 {
		return 0
	}
	last := h[0].T
	if len(v.Lines) == 0 {
		last = h[len(h)-1].T
	}
	for _, l := range v.Lines {
		if l >= 0 && l < len(h) && h[l].T > last {
			last = h[l].T
		}
	}
	return time.Duration(last - h[0].T)
}

// median is the median of the sorted ds.
func median(ds []time.Duration) time.Duration {
	n := len(ds)
	if n%2 == 1 {
		return ds[n/2]
	}
	return (ds[n/2-1] + ds[n/2]) / 2
}

// exposureConfig is the run of variant v under its workload e with seed.
func exposureConfig(v variant, e exposure, seed uint64) Config {
	spec := quickSpec("plain")
	spec.Backend = v.backends[0]
	c := Config{Spec: spec, Workers: 4, Duration: duration(5 * time.Second), Seed: seed,
		Faults: e.faults, Replica: e.replica, Persist: e.persist, Bound: time.Second}
	if e.setup != nil {
		e.setup(&c)
	}
	c.Spec.Variant = v.name
	return c
}

// TestVariantsAreDeclaredOnce: every variant applies to registered backends,
// has a workload that exposes it and a checker that must catch it, and breaks
// something (its Locker, or the worker's side); no name is declared twice.
func TestVariantsAreDeclaredOnce(t *testing.T) {
	seen := map[string]bool{}
	for _, v := range variants {
		if seen[v.name] {
			t.Errorf("variant %s declared twice", v.name)
		}
		seen[v.name] = true
		if v.breaks == "" || len(v.exposed) == 0 || len(v.backends) == 0 {
			t.Errorf("variant %s: says what it breaks, applies to backends, has a workload that exposes it", v.name)
		}
		if v.lock == nil && v.worker == (Breakage{}) && v.tags == "" {
			t.Errorf("variant %s breaks nothing", v.name)
		}
		for _, b := range v.backends {
			if backends[b] == nil {
				t.Errorf("variant %s applies to %s, no registered backend", v.name, b)
			}
		}
		for _, e := range v.exposed {
			if len(e.checkers) == 0 {
				t.Errorf("variant %s (%s): no checker must catch it", v.name, e.name(v.name))
			}
			if c := exposureConfig(v, e, 1); !slices.Contains(v.backends, c.Spec.Backend) {
				t.Errorf("variant %s (%s) runs on %s, not one of its backends %v", v.name, e.name(v.name), c.Spec.Backend, v.backends)
			}
		}
	}
}

func checkers(vs []Violation) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Checker)
	}
	return out
}

// TestRunMatchesThePattern checks which variants' workers prebuild builds
// for a -run pattern.
func TestRunMatchesThePattern(t *testing.T) {
	for _, c := range []struct {
		pattern string
		want    bool
	}{
		{"", true},
		{"TestBrokenVariantsAreCaught", true},
		{"TestBrokenVariantsAreCaught/nodeadline", true},
		{"TestBrokenVariantsAreCaught/node", true},
		{"TestBrokenVariantsAreCaught/rawdel", false},
		{"TestScenarios", false},
		{"TestScenarios|TestBroken", true},
		{"TestBroken/(rawdel|nodeadline)$", true},
		{"TestBroken/[", true},
	} {
		if got := runMatches(c.pattern, "TestBrokenVariantsAreCaught/nodeadline"); got != c.want {
			t.Errorf("runMatches(%q) = %v, want %v", c.pattern, got, c.want)
		}
	}
}
