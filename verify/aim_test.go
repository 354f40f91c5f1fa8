package verify

import (
	"slices"
	"testing"
)

// quickAims are, per scenario, the faults whose effect (see Analysis.Bitten)
// its quick run (the default duration) must show: those that bite on seed 1
// within the quick run's 5 s, by their nature or because they are aimed (a
// crash with persistence and a power loss come as soon as a grant was
// written that the restart loses). The others of its repertoire are
// reported in the quick run and required in a run of -duration (the long
// run), where each is drawn several times. A scenario missing here requires
// its whole repertoire in every run.
var quickAims = map[string][]string{
	"redis-plain":               {FaultReset},
	"redis-plain-aof":           {FaultPowerLoss},
	"redis-plain-rdb":           {FaultCrash},
	"redis-fair-aof":            {FaultPowerLoss},
	"redis-fair-rdb":            {FaultCrash},
	"redis-fair":                {FaultReset},
	"redis-reentrant":           {FaultReset},
	"redis-rw-writers":          {FaultReset},
	"redis-semaphore-2":         {FaultReset},
	"redis-semaphore-resize":    {FaultReset},
	"redis-fair-failover":       {},
	"redlock-5":                 {},
	forceGapScenario:            {FaultForce},
	"memlock":                   {FaultForce},
	"etcd-3":                    {FaultPartition},
	"zookeeper":                 {FaultExpire},
	"zookeeper-3":               {FaultCrash},
	"postgres":                  {},
	"mysql":                     {},
	"postgres-semaphore-resize": {},
	"legacy":                    {},
	"valkey-plain":              {FaultReset, FaultDropRequests},
	"valkey-fair":               {FaultReset},
	"redis-plain-sentinel":      {FaultForce},
	"redis-cluster":             {},
	"redis-rw-readers":          {FaultReset},
	"valkey-rw-readers":         {FaultReset},
	"redis-plain-lock-delay":    {FaultReset},
	"memlock-lock-delay":        {},
	"etcd-3-lock-delay":         {FaultPartition},
	"zookeeper-lock-delay":      {},
	zkForcesScenario:            {FaultForce},
	"nats":                      {},
	"nats-3":                    {FaultCrash},
	"nats-default-sync":         {FaultPowerLoss},
	"postgres-lock-delay":       {},
	"redis-handoff":             {FaultReset},
	"redis-once":                {FaultReset},
	"memlock-once":              {},
	"rueidis-plain":             {},
	// In the long run only (-duration), which requires every fault.
	"postgres-handoff":  {},
	"postgres-once":     {},
	"etcd-3-once":       {},
	"memlock-handoff":   {},
	"redlock-5-handoff": {},
	"etcd-3-handoff":    {},
	"nats-handoff":      {},
	"mysql-fair":        {},
	"nats-power-loss":   {},
}

// aims returns the faults each run of sc must show bit: quickAims's in the
// quick run; none in a run of -duration (the long run), which requires them
// of the scenario's seeds together (see requireBites).
func (sc scenario) aims() []string {
	if *durFlag != 0 {
		return nil
	}
	return quickAims[sc.name]
}

// requireBites fails t, in a run of -duration (the long run), unless every
// fault of sc's repertoire had its effect in at least one of the runs
// tallied for it: a fault that never bit over all of them proved nothing.
// (One run's draws of 60 s do not reach every fault of a repertoire of seven,
// nor does each drawn fault find something to bite on each time.)
func (sc scenario) requireBites(t *testing.T) {
	if *durFlag == 0 {
		return
	}
	talliesMu.Lock()
	tl := tallies[sc.name]
	talliesMu.Unlock()
	if tl == nil {
		return
	}
	for _, f := range sc.faults {
		if tl.bit[f] == 0 {
			t.Errorf("fault: %s had its effect in none of the %d runs of %s (injected %d times): its faults that did: %s",
				f, len(tl.seeds), sc.name, tl.injected[f], Stats{ByFault: tl.injected, Bit: tl.bit}.BitSummary())
		}
	}
}

// TestEveryScenarioNamesItsAims: every scenario says which of its faults its
// quick run must show bit, each one of its repertoire.
func TestEveryScenarioNamesItsAims(t *testing.T) {
	for _, sc := range scenarios {
		q, ok := quickAims[sc.name]
		if !ok {
			t.Errorf("scenario %s names no quick aims", sc.name)
		}
		for _, f := range q {
			if !slices.Contains(sc.faults, f) {
				t.Errorf("scenario %s aims at %s, which it does not inject", sc.name, f)
			}
		}
	}
	for name := range quickAims {
		if !slices.ContainsFunc(scenarios, func(sc scenario) bool { return sc.name == name }) {
			t.Errorf("quick aims of %s, which is no scenario", name)
		}
	}
}
