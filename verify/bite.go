package verify

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// A fault is injected for an effect: a pause for a holder to outlive its
// lease, a crash or a failover for the store to lose what it acknowledged, a
// partition for traffic to be cut. Each fault of a history is judged from the
// history alone, by what the workers saw, as having had its effect (bit) or
// not; Stats.Bit counts those that did, by fault, beside Stats.ByFault's
// count of those injected, and Bitten fails a run in which a fault it aims
// at (Params.Aim) never did.
//
//   - stop: a worker held a lease when it was paused, and the lease's local
//     deadline (the last renewal before the pause) passed before it resumed:
//     the pause outlived the lease.
//   - kill: the worker killed held a lease that was still valid.
//   - a crash, a power loss or a failover the docs name as unsafe on the
//     store (Params.Unsafe): it lost an acknowledged holding: a holding
//     valid when the fault began was, after the fault and before its local
//     deadline, granted to another worker (on a lock one holds at a time),
//     or its holder was told it was gone (Done before the deadline, by no
//     force-unlock; a release refused), and the fault came after the
//     holding's last successful round trip before that; or the store,
//     asked right after its restart (OpStored), did not hold a holding it
//     had granted before the crash that was still within its deadline and
//     neither released nor ended by then; or, for a crash that restarts
//     from a snapshot (FaultSnapshot: a saved RDB, or the length a power
//     loss cuts the log back to), a grant was acknowledged after the
//     snapshot and before the crash: the restart lost it.
//   - force: it removed a holding the history shows.
//   - reset: it cut a connection the workers had open (the proxies count
//     them), or as the network faults below.
//   - a crash of a store that loses nothing and records the connections
//     its servers closed (a ZooKeeper ensemble's leader: the killed server
//     closes those of the workers on it, the others those of theirs as they
//     leave the dead leader to elect another), and a termination of the
//     store's client connections (PostgreSQL's pg_terminate_backend,
//     MariaDB's KILL CONNECTION): it closed one, or as the network faults
//     below.
//   - every other fault (a delay, a black hole, a one-way partition, an etcd
//     partition, a ZooKeeper session expiry, a crash of a store that
//     loses nothing): it cut or held up
//     an operation: an acquisition or a release in flight during it ended
//     with an unknown outcome (by a TTL after it healed, or later with no
//     other fault of its worker or the store in between); or one that takes
//     a single round trip (a try, a release) was held across the heal, in
//     the fault for half its time or an eighth of the TTL, whichever is
//     shorter (a delay: invoked during it, it took at least the delay set);
//     or a lease ended during it or within a TTL
//     after it, by its local deadline or the store's word (not by a
//     force-unlock, a release, or a pause or death of its worker).
//
// A snapshot (FaultSnapshot) is part of the crash that follows it and is not
// judged alone.

// bites returns how many of the history's faults had their effect, by fault.
func (a *Analysis) bites() map[string]int {
	if a.onceWorkload() {
		return a.onceBites()
	}
	bit := map[string]int{}
	for _, f := range a.faults {
		if f.name != FaultSnapshot && f.name != FaultForce && a.bit(f) {
			bit[f.name]++
		}
	}
	for _, fo := range a.forces {
		if len(fo.gs) > 0 {
			bit[FaultForce]++
		}
	}
	return bit
}

// bit reports whether fault f had its effect (see above).
func (a *Analysis) bit(f fault) bool {
	switch {
	case f.name == FaultStop:
		return a.pausedPastDeadline(f)
	case f.name == FaultKill:
		return a.killedHolder(f)
	case a.P.Unsafe[f.name]:
		return a.lostHolding(f)
	case f.cut > 0:
		return true
	}
	return a.cutOperation(f)
}

// deadlineAt returns g's local deadline in force at t: its acquisition's, or
// the last renewal's seen by then.
func (g *grant) deadlineAt(t int64) int64 {
	dl := g.ok.Deadline
	for _, r := range g.renewals {
		if r.t <= t {
			dl = r.deadline
		}
	}
	return dl
}

// pausedPastDeadline: a holding of the stopped worker, valid when the pause
// began, reached its local deadline before the pause ended.
func (a *Analysis) pausedPastDeadline(f fault) bool {
	for _, gs := range a.grants {
		for _, g := range gs {
			if g.ok.Proc != f.target || g.ok.T > f.start || g.end <= f.start {
				continue
			}
			if dl := g.deadlineAt(f.start); dl > f.start && dl < f.end {
				return true
			}
		}
	}
	return false
}

// killedHolder: the killed worker held a lease still valid at the kill.
func (a *Analysis) killedHolder(f fault) bool {
	for _, gs := range a.grants {
		for _, g := range gs {
			if g.ok.Proc == f.target && g.death == f.start && g.ok.T <= f.start &&
				g.deadlineAt(f.start) > f.start && (g.done == 0 || g.done > f.start) {
				return true
			}
		}
	}
	return false
}

// lostHolding: an unsafe fault lost an acknowledged holding (see above).
func (a *Analysis) lostHolding(f fault) bool {
	if a.grantedSinceSnapshot(f) {
		return true
	}
	for _, gs := range a.grants {
		for _, g := range gs {
			if g.ok.T > f.end || g.end <= f.start {
				continue // granted after the fault, or no longer held when it began
			}
			for _, t := range a.lossSeen(g, gs, f.start) {
				if f.end >= a.lastTrip(g, t) {
					return true
				}
			}
			if a.lostInStore(g, f) {
				return true
			}
		}
	}
	return false
}

// grantedSinceSnapshot: f, a crash, restarts the store from a snapshot (the
// last FaultSnapshot before it, a saved RDB or the noted length of a log a
// power loss cuts back to), and a grant was acknowledged after that
// snapshot and before f: the restart lost it.
func (a *Analysis) grantedSinceSnapshot(f fault) bool {
	var snap *fault
	for i := range a.faults {
		s := &a.faults[i]
		if s.name == FaultSnapshot && s.end <= f.start && (snap == nil || s.end > snap.end) {
			snap = s
		}
	}
	if snap == nil {
		return false
	}
	for _, o := range a.faults { // the snapshot is this crash's: no other crash between
		if a.P.Unsafe[o.name] && o.start > snap.end && o.start < f.start {
			return false
		}
	}
	for _, gs := range a.grants {
		for _, g := range gs {
			if g.ok.T > snap.end && g.ok.T < f.start {
				return true
			}
		}
	}
	return false
}

// lostInStore: the store, asked during f, right after the restart or the
// promotion (OpStored), did not hold g, which it had granted before it was
// asked, whose holder had not sent its release, died or been told it lost it
// before f began (what was sent may have landed) nor had its release
// acknowledged before the store was asked, and whose local deadline then had
// not passed.
func (a *Analysis) lostInStore(g *grant, f fault) bool {
	if a.P.Kind == "sem" || g.read || g.relInv != 0 && g.relInv <= f.start ||
		g.death != 0 && g.death <= f.start || g.done != 0 && g.done <= f.start {
		return false
	}
	for _, s := range a.stored {
		if s.Key == g.ok.Key && s.T >= f.start && s.T <= f.end && g.ok.T < s.T && s.Token != g.ok.Token &&
			(g.released == 0 || g.released > s.T) && g.deadlineAt(s.T) > s.T {
			return true
		}
	}
	return false
}

// lossSeen returns the moments from `from` on at which the history shows g's
// holding gone before its deadline: another worker's grant of the key inside
// g's window (on a lock that one holds at a time, a reader beside a reader
// excepted), a Done before the deadline that neither a force-unlock nor the
// deadline itself caused (nor a release, nor the holder's death), a release
// refused before the deadline.
func (a *Analysis) lossSeen(g *grant, gs []*grant, from int64) []int64 {
	var ts []int64
	if a.P.Kind != "sem" {
		for _, h := range gs {
			if h.ok.Proc != g.ok.Proc && h.ok.T > g.ok.T && h.ok.T >= from && h.ok.T < g.end && !(g.read && h.read) {
				ts = append(ts, h.ok.T)
			}
		}
	}
	if g.done >= from && g.done+int64(2*time.Millisecond) < g.deadlineAt(g.done) && !g.forcedBy(g.done) &&
		(g.relInv == 0 || g.relInv > g.done) && (g.death == 0 || g.death > g.done) &&
		!strings.Contains(a.H[g.doneLine].Err, "local deadline") {
		ts = append(ts, g.done)
	}
	if g.relFail && g.relInv >= from && g.relInv < g.deadlineAt(g.relInv) {
		ts = append(ts, g.relInv)
	}
	return ts
}

// cutOperation: the fault cut or held up an operation of the workers, or a
// lease ended during it (see above).
func (a *Analysis) cutOperation(f fault) bool {
	lo, hi, ttl := f.start, f.end, int64(a.P.TTL)
	for _, ops := range [][]acq{a.acqs, a.rels} {
		for _, x := range ops {
			if x.inv.T > hi || x.end.T < lo {
				continue
			}
			if x.end.Type == Info && (x.end.T <= hi+ttl || !a.faultNear(hi+1, x.end.T, x.inv.Proc)) {
				return true
			}
			if x.inv.Op == OpAcquire && x.inv.Mode != "try" {
				continue // a waiter's time says nothing of the network's
			}
			if f.delay > 0 {
				if x.inv.T >= lo && x.end.T-x.inv.T >= int64(f.delay) {
					return true
				}
				continue
			}
			if x.end.T > hi && hi > lo && min(x.end.T, hi)-max(x.inv.T, lo) >= min((hi-lo)/2, ttl/8) {
				return true
			}
		}
	}
	for _, gs := range a.grants {
		for _, g := range gs {
			if g.done < lo || g.done > hi+ttl || g.ok.T > g.done || g.forcedBy(g.done) ||
				g.relInv != 0 && g.relInv <= g.done || g.death != 0 && g.death <= g.done ||
				a.stopped(g.ok.Proc, g.ok.T, g.done) {
				continue
			}
			return true
		}
	}
	return false
}

// stopped reports whether worker proc was paused at some time in [t0, t1].
func (a *Analysis) stopped(proc int, t0, t1 int64) bool {
	for _, f := range a.faults {
		if f.name == FaultStop && f.target == proc && f.start <= t1 && f.end >= t0 {
			return true
		}
	}
	return false
}

// Bitten: each fault the run aims at (Params.Aim) had its effect at least
// once over the run (see bites): a scenario whose faults never bit proved
// nothing about them.
func (a *Analysis) Bitten() *Violation {
	for _, f := range a.P.Aim {
		if a.Stats.Bit[f] == 0 {
			return &Violation{Checker: "fault",
				Msg: fmt.Sprintf("no %s of the %d injected had the effect it is injected for (%s); faults that did: %s",
					f, a.Stats.ByFault[f], faultEffect(f, a.P.Unsafe[f]), a.Stats.BitSummary())}
		}
	}
	return nil
}

// faultEffect names the effect fault f is injected for (unsafe: the store
// may lose acknowledged holdings to it).
func faultEffect(f string, unsafe bool) string {
	switch {
	case f == FaultStop:
		return "a holder paused past its lease's deadline"
	case f == FaultKill:
		return "a holder killed holding"
	case unsafe:
		return "an acknowledged holding lost"
	case f == FaultForce:
		return "a holding removed"
	}
	return "an operation cut or held up, or a lease ended by it"
}

// BitSummary lists, by fault, how many of those injected had the effect they
// are injected for: "crash 2/3, stop 1/4".
func (s Stats) BitSummary() string {
	var names []string
	for f := range s.ByFault {
		if f != FaultSnapshot {
			names = append(names, f)
		}
	}
	slices.Sort(names)
	var parts []string
	for _, f := range names {
		parts = append(parts, fmt.Sprintf("%s %d/%d", f, s.Bit[f], s.ByFault[f]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
