package verify

// The Once workload (see once.go) records computations under the lock, not
// grants: its faults are judged by bites with a computation standing for a
// holding, from the computation's start (its lock was granted just before)
// to its end (or its worker's death):
//
//   - stop: the stopped worker was computing when the pause began, and the
//     pause lasted longer than the TTL: no renewal ran during it, so the
//     lease's deadline passed before it ended;
//   - kill: the killed worker was computing: it died holding the lock;
//   - force: a computation of the forced key was under way at the force: it
//     removed that holding;
//   - a crash, a failover or a power loss the docs name as unsafe, and every
//     other fault: a Do or a computation under way during it ended otherwise
//     than OK (a Do failed or gave up, a computation lost its lock) during
//     it or within a TTL after it.

// onceWorkload reports whether the history is of the Once workload: its
// workers call Once's Do.
func (a *Analysis) onceWorkload() bool {
	for _, e := range a.H {
		if e.Op == OpOnce {
			return true
		}
	}
	return false
}

// onceBites returns how many of the history's faults had their effect, by
// fault, in the Once workload (see above); a fault with a cut count (a reset,
// a crash or a termination that closed the workers' connections) bit as in
// bites.
func (a *Analysis) onceBites() map[string]int {
	comps, calls := onceOps(a.H, OpCompute), onceOps(a.H, OpOnce)
	bit := map[string]int{}
	for _, f := range a.faults {
		if f.name != FaultSnapshot && f.name != FaultForce && (f.cut > 0 || a.onceBit(f, comps, calls)) {
			bit[f.name]++
		}
	}
	for _, fo := range a.forces {
		for _, c := range comps {
			if c.inv.Key == fo.ok.Key && c.inv.T <= fo.ok.T && (c.end == nil || c.end.T >= fo.inv.T) {
				bit[FaultForce]++
				break
			}
		}
	}
	return bit
}

// onceBit reports whether fault f of the Once workload had its effect (see
// above).
func (a *Analysis) onceBit(f fault, comps, calls []onceOp) bool {
	ttl := int64(a.P.TTL)
	computing := func(c onceOp) bool {
		return c.inv.Proc == f.target && c.inv.T <= f.start && (c.end == nil || c.end.T > f.start)
	}
	switch f.name {
	case FaultStop:
		if f.end-f.start <= ttl {
			return false
		}
		for _, c := range comps {
			if computing(c) {
				return true
			}
		}
		return false
	case FaultKill:
		for _, c := range comps {
			if computing(c) {
				return true
			}
		}
		return false
	}
	for _, ops := range [][]onceOp{calls, comps} {
		for _, c := range ops {
			if c.end == nil || c.end.Type == OK || c.inv.T > f.end || c.end.T < f.start || c.end.T > f.end+ttl {
				continue
			}
			return true
		}
	}
	return false
}
