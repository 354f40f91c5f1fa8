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
	"postgres-lock-delay":       {},
	"redis-handoff":             {FaultReset},
	"redis-once":                {FaultReset},
	"memlock-once":              {},
	"rueidis-plain":             {},
	// In the long run only (-duration), which requires every fault.
	"postgres-handoff": {},
	"postgres-once":    {},
	"etcd-3-once":      {},
	"memlock-handoff":  {},
	"mysql-fair":       {},
}

// aims returns the faults sc's run must show bit: quickAims's in the quick
// run, its whole repertoire in a run of -duration.
func (sc scenario) aims() []string {
	if q, ok := quickAims[sc.name]; ok && *durFlag == 0 {
		return q
	}
	return slices.Clone(sc.faults)
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
