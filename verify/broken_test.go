package verify

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestBrokenVariantsAreCaught runs each deliberately broken variant under each
// workload that exposes it, seed after seed, until a checker that must catch
// it does, and logs how long that took.
func TestBrokenVariantsAreCaught(t *testing.T) {
	for _, v := range variants {
		for _, e := range v.exposed {
			t.Run(e.name(v.name), func(t *testing.T) {
				start := time.Now()
				for seed := uint64(1); seed <= 8; seed++ {
					r := Run(t, exposureConfig(v, e, seed))
					for _, vi := range r.Violations {
						if slices.Contains(e.checkers, vi.Checker) {
							t.Logf("caught by %s after %v (seed %d, %d operations, %d faults):\n%s",
								vi.Checker, time.Since(start).Round(100*time.Millisecond), seed, r.Stats.Ops, r.Stats.Faults, vi.Format(r.History))
							return
						}
					}
					t.Logf("seed %d: not caught (%s; Jain's index %.2f over %d grants)", seed, fmt.Sprint(checkers(r.Violations)), r.Stats.Jain, r.Stats.Grants)
				}
				t.Errorf("variant %s not caught by %v", v.name, e.checkers)
			})
		}
	}
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
		if v.lock == nil && v.worker == (Breakage{}) {
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
