package verify

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// brokenCases are the broken variants with the faults that expose them and the
// checker that must catch them.
var brokenCases = []struct {
	variant string
	faults  []string
	replica bool
	persist string
	checker []string
}{
	{"rawdel", []string{FaultStop}, false, "", []string{"exclusion", "told-first", "spurious-loss"}},
	{"repeat", nil, false, "", []string{"fencing"}},
	{"prefix", []string{FaultFailover}, true, "", []string{"fencing"}},
	{"prefix", []string{FaultCrash}, false, "rdb", []string{"fencing"}},
	{"nodone", nil, false, "", []string{"exclusion", "told-first"}},
	{"noexpiry", []string{FaultKill}, false, "", []string{"recovery", "liveness"}},
	{"renewafter", nil, false, "", []string{"liveness"}},
	{"lostack", nil, false, "", []string{"lost-write"}},
	{"latecleanup", nil, false, "", []string{"exclusion", "fencing", "told-first"}},
	{"rwshared", nil, false, "", []string{"exclusion"}},
	{"shortwait", nil, false, "", []string{"fairness"}},
	{"nosize", nil, false, "", []string{"exclusion"}},
	{"nodelay", []string{FaultKill}, false, "", []string{"lock-delay"}},
	{"nopush", []string{FaultForce}, false, "", []string{"told-at-once"}},
	// Each force drops the subscriptions as it publishes (Config.ForceGap):
	// only the check when they are set up again tells the holders.
	{"nosubcheck", []string{FaultForce}, false, "", []string{"told-at-once"}},
}

// TestBrokenVariantsAreCaught runs each deliberately broken variant under the
// faults that expose it, seed after seed, until the checker that must catch it
// does, and logs how long that took.
func TestBrokenVariantsAreCaught(t *testing.T) {
	for _, bc := range brokenCases {
		name := bc.variant
		if bc.persist != "" {
			name += "-" + bc.persist
		}
		if bc.replica {
			name += "-failover"
		}
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			for seed := uint64(1); seed <= 8; seed++ {
				spec := quickSpec("plain")
				spec.Variant = bc.variant
				if bc.variant == "prefix" {
					// Records that outlive the restart or the promotion.
					spec.TTL, spec.Hold = time.Second, 150*time.Millisecond
					spec.Keys = []string{"a", "b", "c", "d", "e", "f"} // idle keys: released records at a cut
				}
				if bc.variant == "rawdel" {
					// Holders hold long (renewed), so that a stop likely
					// hits one, and its release comes after its lock
					// went to another.
					spec.Hold = time.Second
				}
				if bc.variant == "rwshared" { // the read-write lock with readers
					spec.Kind, spec.ReadShare = quickSpec(rwReaders).Kind, quickSpec(rwReaders).ReadShare
				}
				if bc.variant == "nosize" { // the semaphore resized during the run
					spec.Kind, spec.N, spec.Resize = "sem", quickSpec(semResize).N, true
				}
				if bc.variant == "nodelay" {
					spec = quickSpec(delayed)
					spec.Variant, spec.Keys = bc.variant, []string{"a"} // waiters for every holder that dies
				}
				if bc.variant == "nosubcheck" {
					forceGapTiming(&spec)
				}
				if bc.variant == "renewafter" {
					spec.Wait = 3 * time.Second // waiters outlast the hand-over's bound
				}
				masters := 0
				if bc.variant == "latecleanup" || bc.variant == "shortwait" { // Redlock variants
					spec.Backend, masters = "redlock", 5
				}
				if bc.variant == "latecleanup" {
					spec.Keys = []string{"a"} // more attempts split the masters
				}
				if bc.variant == "shortwait" {
					// Every worker contends for one key, and no holder
					// exits holding: a holder's monopoly ends only when a
					// waiter's retry finds the lock free.
					spec.Keys, spec.ExitProb = []string{"a"}, 0
				}
				c := Config{Spec: spec, Workers: 4, Duration: duration(5 * time.Second), Seed: seed,
					Faults: bc.faults, Replica: bc.replica, Persist: bc.persist, Masters: masters, Bound: time.Second,
					Healed:   bc.variant == "noexpiry", // the recovery checker sees the kills heal
					ForceGap: bc.variant == "nosubcheck"}
				r := Run(t, c)
				for _, v := range r.Violations {
					if slices.Contains(bc.checker, v.Checker) {
						t.Logf("caught by %s after %v (seed %d, %d operations, %d faults):\n%s",
							v.Checker, time.Since(start).Round(100*time.Millisecond), seed, r.Stats.Ops, r.Stats.Faults, v.Format(r.History))
						return
					}
				}
				t.Logf("seed %d: not caught (%s; Jain's index %.2f over %d grants)", seed, fmt.Sprint(checkers(r.Violations)), r.Stats.Jain, r.Stats.Grants)
			}
			t.Errorf("variant %s not caught by %v", bc.variant, bc.checker)
		})
	}
}

func checkers(vs []Violation) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Checker)
	}
	return out
}
