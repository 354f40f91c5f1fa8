package verify

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Violation is the first breach of one property found in a history.
type Violation struct {
	Checker string // fencing, resource, lost-write, exclusion, spurious-loss, linearizable, told-first, told-at-once, lock-delay, hand-off, once, liveness, recovery, fairness, worker, params, latch, barrier, fault
	Msg     string
	Lines   []int // the events involved (Event.Line)
}

// Format prints the violation with the history around the events involved.
func (v Violation) Format(h []Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s\n", v.Checker, v.Msg)
	shown := map[int]bool{}
	for _, l := range v.Lines {
		for i := max(0, l-4); i <= min(len(h)-1, l+4); i++ {
			if !shown[i] {
				shown[i] = true
				mark := "  "
				for _, m := range v.Lines {
					if m == i {
						mark = "=>"
					}
				}
				fmt.Fprintf(&b, "  %s %s\n", mark, h[i])
			}
		}
	}
	return b.String()
}

// Params are what the checkers need to know about the run.
type Params struct {
	Kind  string        // the lock kind (sem: at most N holders)
	N     int           // the semaphore's permits
	TTL   time.Duration // the locks' TTL
	Bound time.Duration // liveness: how long after TTL a waiter may wait for a free lock
	// Recovery is how long after the last fault healed (and its TTL) the
	// store may take to come back to a waiter: what a fault left (a dead
	// waiter's queue entry, a lease renewed by an election) to expire, the
	// clients to reconnect. Recovery checks the time after (0: no
	// allowance stated, nothing checked).
	Recovery time.Duration
	// Delay is the locks' lock-delay (0: none): after a holding that ended
	// without a clean release, nobody gets the key for that long.
	Delay time.Duration
	// Unsafe names the faults the docs name as breaking exclusion (a crash
	// of the store without durable state, a failover to a lagging replica):
	// two holders at once are excused across one of them, but their tokens
	// must still order them.
	Unsafe map[string]bool
	// TokensBack: the store hands out again the tokens of grants an unsafe
	// fault lost (NATS's revisions, a stream's sequence, after a power loss
	// under the default sync): Fencing excuses a token repeated, or not
	// above one granted before, across such a fault.
	TokensBack bool
	// Told is told-at-once's bound: how soon after a force-unlock completes
	// its holder's Done fires (0: ToldBound of TTL).
	Told time.Duration
	// LateWatch: a holder may miss a force-unlock that came before the
	// subscription or watch that tells it was up, and learn of it at its
	// renewal, so told-at-once excuses a holding younger than its bound.
	// Not on Redis (every kind, Redlock's masters too), whose Client checks
	// its holdings each time its loss subscription is established (at
	// first, and again after it dropped), nor on etcd, whose Driver reads
	// them when its loss watch begins, nor on PostgreSQL, whose Driver checks
	// them when its LISTEN starts, nor on memlock, which tells the holder
	// itself; see the stores that need it in Run.
	LateWatch bool
	// ForceSpans: a force-unlock is not one step on the store but one per
	// node (Redlock's masters), and removes, on each, whatever it holds
	// then: an acquisition under way while it ran may be granted by nodes
	// that the force reaches after, and lose its majority to it. The force
	// names the holder it found (the one before), so such a grant counts as
	// forced by it too: its loss is no spurious one, and its overlap with a
	// later holder is excused until a renewal after the force succeeded; as
	// the force may have missed it, its holder need not be told.
	ForceSpans bool
	// HTML is where Check's linearizability check writes porcupine's
	// visualization of a history it finds not linearizable (empty: none).
	HTML string
	// LinTimeout bounds Check's linearizability check (0: 20 s); a history
	// it could not decide by then fails.
	LinTimeout time.Duration
	// Leftover is what was left of the locks on the store once every
	// holder ended and a TTL passed (what outlives them by design
	// excepted): Liveness fails on any.
	Leftover []string
	// ResultTTL is the Once workload's result TTL: a value stored is not
	// computed again within it (0: nothing judged but the values returned).
	ResultTTL time.Duration
	// ResultMax is how long a stored result may live at most (the stores
	// that round it up: more than ResultTTL; 0: not judged).
	ResultMax time.Duration
	// Aim names the faults the run is for: Bitten fails unless each of
	// them had, at least once, the effect it is injected for.
	Aim []string
	// Detached is how long after its Detach completed the store may keep a
	// detached holding that nothing renews (0: its TTL and handOffSlack): a
	// Resume that succeeded later fails HandOff.
	Detached time.Duration
}

// params reports Params the checkers cannot judge by.
func (a *Analysis) params() *Violation {
	if a.P.Kind == "sem" && a.P.N < 1 {
		return &Violation{Checker: "params", Msg: fmt.Sprintf("a semaphore of %d permits: Params.N must be 1 or more", a.P.N)}
	}
	return nil
}

// ToldBound is told-at-once's default bound for locks of ttl: a sixth of it, a
// second at most. It lies well below the renewal interval (a third of the
// TTL), at which a holder that nobody told learns of the loss anyway, and
// well above a pushed loss's few milliseconds: 67 ms for the quick runs'
// 400 ms TTL on Redis, 167 ms for the 1 s of etcd, ZooKeeper and PostgreSQL.
func ToldBound(ttl time.Duration) time.Duration { return min(ttl/6, time.Second) }

// grant is one successful acquisition with its validity window.
type grant struct {
	inv, ok  Event
	read     bool  // a read-write lock's read side
	end      int64 // the end of its validity window
	relInv   int64 // when its release was invoked (0: never)
	released int64 // completion of an owner-checked release that succeeded (0: none)
	relFail  bool  // its release completed refused (ErrNotHeld: the holding had ended)
	done     int64 // when Done fired (0: never seen)
	doneLine int
	deadline int64 // the last local deadline seen (0: none)
	death    int64 // when its process exited or was killed (0: it did not)
	forced   int64 // when a force-unlock that removed it was invoked (0: none)
	forceEnd int64 // when that force completed
	renewals []renewal
	resumed  bool // taken up by Resume (inv, ok: its invocation and completion)
}

// renewal is a successful renewal of a grant as its worker saw it: when the
// deadline was seen to move, and the new deadline.
type renewal struct{ t, deadline int64 }

// forceOp is a force-unlock that completed (FaultForce), and the grants of the
// holdings it removed, where the history shows them.
type forceOp struct {
	inv, ok Event
	gs      []*grant
}

// Analysis is a history split into what the checkers use.
type Analysis struct {
	H      []Event
	P      Params
	grants map[string][]*grant // per key, by grant completion
	acqs   []acq               // every acquisition, with its completion
	rels   []acq               // every release, with its completion
	stored []Event             // what the store held of a key after a restart (OpStored)
	faults []fault
	forces []forceOp // the force-unlocks that removed a holding
	// resizes are a semaphore's changes of size, per key (see OpResize).
	resizes map[string][]resizeOp
	Stats   Stats
}

type acq struct{ inv, end Event }

type fault struct {
	name       string
	target     int
	start, end int64
	line       int
	delay      time.Duration // a delay's, of a request and its reply
	cut        int           // a reset's: the connections it cut
}

// Stats count what a history holds.
type Stats struct {
	Ops, Grants, Writes, Refused, Faults int
	Resizes                              int            // a semaphore's changes of size that completed
	Resumes                              int            // holdings taken up by Resume
	Computes                             int            // Once's computations that completed
	ByFault                              map[string]int // faults injected, by name
	Bit                                  map[string]int // of those, the ones that had their effect, by name (see Bitten)
	Jain                                 float64        // Jain's fairness index of grants per worker
	MaxWait                              time.Duration  // the longest successful wait
	MaxTold                              time.Duration  // the longest from a force-unlock's completion to its holder's Done
	// FairJudged counts the pairs of waiters whose order of service the
	// fair lock's checker judged, FairExcused those of them a fault
	// excused (see Fairness).
	FairJudged, FairExcused int
	// Repeated counts the grants whose token an earlier grant of the key
	// had (a store whose tokens went back; see Params.TokensBack).
	Repeated int
}

// Analyze pairs the events of h and computes the holders' validity windows.
func Analyze(h []Event, p Params) *Analysis {
	a := &Analysis{H: h, P: p, grants: map[string][]*grant{}, resizes: map[string][]resizeOp{}}
	inv := map[string]Event{}
	holding := map[int]*grant{} // per process: its current grant
	byToken := map[string]*grant{}
	tk := func(proc int, key string, tok uint64) string { return fmt.Sprint(proc, "/", key, "/", tok) }
	perProc := map[int]int{}
	openFault := map[string]*fault{}
	var forceInv Event // the force under way (the nemesis forces one at a time)
	death := func(proc int, t int64) {
		if g := holding[proc]; g != nil && g.death == 0 {
			g.death = t
		}
		delete(holding, proc)
	}
	for _, e := range h {
		switch e.Op {
		case OpNemesis:
			k := fmt.Sprint(e.Fault, e.Target)
			switch e.Type {
			case Invoke:
				if e.Fault != FaultStall { // seen, not injected
					a.Stats.Faults++
				}
				if a.Stats.ByFault == nil {
					a.Stats.ByFault = map[string]int{}
				}
				a.Stats.ByFault[e.Fault]++
				if e.Fault == FaultForce {
					forceInv = e
					continue
				}
				openFault[k] = &fault{name: e.Fault, target: e.Target, start: e.T, end: math.MaxInt64, line: e.Line, delay: e.Delay + e.ReplyDelay}
				if e.Fault == "kill" {
					death(e.Target, e.T)
				}
			default:
				if e.Fault == FaultForce {
					// A force that removed a holding excuses nothing but
					// its holder's overlap (see forcedBy); one of unknown
					// outcome is a fault of the store, and so is one that
					// found no holding to name where it removes whatever
					// each node holds all the same (Params.ForceSpans: a
					// holding it found on too few nodes, or one it cut).
					switch {
					case e.Type == OK:
						a.forces = append(a.forces, forceOp{inv: forceInv, ok: e})
					case e.Type == Info || e.Type == Fail && a.P.ForceSpans:
						a.faults = append(a.faults, fault{name: e.Fault, target: -1, start: forceInv.T, end: e.T, line: forceInv.Line})
					}
					continue
				}
				if e.Fault == FaultKill {
					// Dead by now: a grant its process recorded after the
					// kill was invoked (its reply came as the signal went)
					// ended with it.
					death(e.Target, e.T)
				}
				if f := openFault[k]; f != nil {
					f.end, f.cut = e.T, e.Cut
					a.faults = append(a.faults, *f)
					delete(openFault, k)
				}
			}
			continue
		case OpStart, "exit":
			death(e.Proc, e.T)
			continue
		case OpExit:
			death(e.Target, e.T)
			continue
		case OpStored:
			a.stored = append(a.stored, e)
			continue
		case OpDone, OpExtend:
			if g := byToken[tk(e.Proc, e.Key, e.Token)]; g != nil {
				if e.Op == OpDone && g.done == 0 {
					g.done, g.doneLine = e.T, e.Line
				}
				if e.Op == OpExtend {
					g.deadline = e.Deadline
					g.renewals = append(g.renewals, renewal{e.T, e.Deadline})
				}
			}
			continue
		}
		k := opKey(e)
		if e.Type == Invoke {
			inv[k] = e
			if e.Op == OpRelease || e.Op == OpDetach { // a detached lease acts no more
				if g := holding[e.Proc]; g != nil {
					if e.Deadline != 0 {
						g.deadline = e.Deadline
					}
					g.relInv = e.T
				}
			}
			continue
		}
		in, ok := inv[k]
		if !ok {
			continue
		}
		delete(inv, k)
		a.Stats.Ops++
		switch e.Op {
		case OpAcquire:
			a.acqs = append(a.acqs, acq{in, e})
			if e.Proc >= 0 {
				perProc[e.Proc] += 0 // a worker that tried counts, granted or not
			}
			if e.Type == OK {
				g := &grant{inv: in, ok: e, deadline: e.Deadline, read: in.Read || e.Read}
				a.grants[e.Key] = append(a.grants[e.Key], g)
				holding[e.Proc] = g
				byToken[tk(e.Proc, e.Key, e.Token)] = g
				perProc[e.Proc]++
				a.Stats.Grants++
				if in.Mode != "try" {
					a.Stats.MaxWait = max(a.Stats.MaxWait, time.Duration(e.T-in.T))
				}
			}
		case OpResume:
			if e.Type == OK {
				g := &grant{inv: in, ok: e, deadline: e.Deadline, resumed: true}
				a.grants[e.Key] = append(a.grants[e.Key], g)
				holding[e.Proc] = g
				byToken[tk(e.Proc, e.Key, e.Token)] = g
				a.Stats.Resumes++
			}
		case OpDetach:
			delete(holding, e.Proc)
		case OpCompute:
			a.Stats.Computes++
		case OpRelease:
			a.rels = append(a.rels, acq{in, e})
			if g := holding[e.Proc]; g != nil {
				if e.Type == OK {
					g.released = e.T
				}
				g.relFail = e.Type == Fail
				delete(holding, e.Proc)
			}
		case OpResize:
			a.resizes[e.Key] = append(a.resizes[e.Key], resizeOp{in, e})
			if e.Type == OK {
				a.Stats.Resizes++
			}
		case OpRead, OpWrite:
			if e.Op == OpWrite {
				a.Stats.Writes++
				if e.Type == Fail {
					a.Stats.Refused++
				}
			}
		}
	}
	for _, f := range openFault {
		a.faults = append(a.faults, *f)
	}
	for _, in := range inv { // a resize that never completed may have landed
		if in.Op == OpResize {
			a.resizes[in.Key] = append(a.resizes[in.Key], resizeOp{in, Event{T: math.MaxInt64, Type: Info}})
		}
	}
	a.sortResizes()
	// Each window ends at the first of: the release's invocation, Done, the
	// local deadline, the holder's death.
	for _, gs := range a.grants {
		for _, g := range gs {
			end := int64(math.MaxInt64)
			for _, t := range []int64{g.relInv, g.done, g.deadline, g.death} {
				if t != 0 && t < end {
					end = t
				}
			}
			g.end = end
		}
	}
	a.matchForces()
	a.Stats.Bit = a.bites()
	_, a.Stats.FairJudged, a.Stats.FairExcused = a.fairOrder()
	var sum, sq float64
	for _, n := range perProc {
		sum += float64(n)
		sq += float64(n) * float64(n)
	}
	if len(perProc) > 0 && sq > 0 {
		a.Stats.Jain = sum * sum / (float64(len(perProc)) * sq)
	}
	for _, gs := range a.grants {
		seen := map[uint64]bool{}
		for _, g := range gs {
			if !g.resumed && seen[g.ok.Token] {
				a.Stats.Repeated++
			}
			seen[g.ok.Token] = true
		}
	}
	return a
}

// matchForces finds the grants each force removed: the key's grant of the
// token or of the owner the force named (the owner alone decides when a
// Redlock's nodes disagree on the token: a node that lost the holding and
// took it anew drew a token of its own), or the one valid when it was invoked
// where the Inspector names neither, granted before the force completed; on a lock
// that several hold (a semaphore, a read-write lock), whose force removes
// every holder, each grant valid when the force was invoked. Those grants are
// marked forced from the force's invocation on, and so are, on a lock that
// several hold, the grants that completed while the force ran (granted before
// it or after: they are not checked as removed).
func (a *Analysis) matchForces() {
	shared := a.P.Kind == "sem" || a.P.Kind == "rw"
	for i := range a.forces {
		fo := &a.forces[i]
		for _, g := range a.grants[fo.ok.Key] {
			// The owner names an acquisition, which may make several
			// attempts: it names the grant only when seen before the force
			// began (a grant of a later attempt, under way while the force
			// ran or after it, is another holding).
			named := fo.ok.Token != 0 && g.ok.Token == fo.ok.Token || fo.ok.Owner != "" && g.ok.Owner == fo.ok.Owner && g.ok.T < fo.inv.T
			// An acquisition under way while a force of every node ran
			// (see Params.ForceSpans).
			spans := a.P.ForceSpans && g.inv.T < fo.ok.T && g.ok.T >= fo.inv.T
			if g.ok.T > fo.ok.T && !named && !spans {
				continue // granted after the force (a grant the force names was granted before it, its reply on its way)
			}
			valid := g.ok.T <= fo.inv.T && g.end > fo.inv.T // when the force was invoked
			if spans && !named && !shared {
				// It may have lost nodes to the force, or none: its loss
				// is excused, but its holder need not be told.
				if g.forced == 0 || fo.inv.T < g.forced {
					g.forced, g.forceEnd = fo.inv.T, fo.ok.T
				}
				continue
			}
			switch {
			case shared:
				if g.end <= fo.inv.T {
					continue
				}
				if valid {
					fo.gs = append(fo.gs, g)
				}
			case fo.ok.Token != 0 || fo.ok.Owner != "":
				if !named {
					continue
				}
				fo.gs = append(fo.gs, g)
			case !valid:
				continue
			default:
				fo.gs = append(fo.gs, g)
			}
			if g.forced == 0 || fo.inv.T < g.forced {
				g.forced, g.forceEnd = fo.inv.T, fo.ok.T
			}
		}
		for _, g := range fo.gs {
			if g.done > fo.ok.T {
				a.Stats.MaxTold = max(a.Stats.MaxTold, time.Duration(g.done-fo.ok.T))
			}
		}
	}
}

// forcedBy reports whether a force-unlock of g was invoked by t: from then on,
// g's holder may be overlapped until it is told (see ToldAtOnce).
func (g *grant) forcedBy(t int64) bool { return g.forced != 0 && g.forced <= t }

// opKey pairs an operation's invocation with its completion: its number
// within its worker's process (PID): a worker started again after a kill
// numbers its operations from 1 again, and an operation of the killed process
// that never completed must not take the completion of the new one's.
func opKey(e Event) string { return fmt.Sprint(e.PID, "/", e.Proc, "/", e.ID) }

// unsafeBetween reports whether a fault the docs name as unsafe for exclusion
// began between t0 and t1.
func (a *Analysis) unsafeBetween(t0, t1 int64) bool {
	for _, f := range a.faults {
		if a.P.Unsafe[f.name] && f.start <= t1 && f.end >= t0 {
			return true
		}
	}
	return false
}

// faultNear reports whether any fault overlapped [t0, t1] (optionally only
// those hitting proc; -2 for any).
func (a *Analysis) faultNear(t0, t1 int64, proc int) bool {
	return a.faultNearExcept(t0, t1, proc, nil)
}

// faultNearExcept is faultNear over the faults not named in except.
func (a *Analysis) faultNearExcept(t0, t1 int64, proc int, except map[string]bool) bool {
	for _, f := range a.faults {
		if !except[f.name] && f.start <= t1 && f.end >= t0 && (proc == -2 || f.target == proc || f.target < 0) {
			return true
		}
	}
	return false
}

// networkFaults are the faults of the network between the workers and the
// store, or between etcd's members: none is a fault the docs name as unsafe.
// A holder cut off or slowed down is told at its local deadline, which its
// last successful round trip's start bounds, so before the store, which
// counts the TTL from when that request reached it, can let anybody else in;
// and a partitioned etcd member grants nothing. A delay only moves the
// store's expiry later than the holder's deadline, so no delay, however long
// beside the drift margin, needs an allowance. They excuse neither exclusion
// nor told-first; they do excuse an early loss, a slow hand-over and the
// order of service.
var networkFaults = map[string]bool{FaultReset: true, FaultDelay: true, FaultBlackhole: true, FaultDropRequests: true, FaultDropReplies: true, FaultExpire: true, FaultPartition: true}

// faultNearBut reports whether a fault overlapped [t0, t1], other than the
// kill of worker proc.
func (a *Analysis) faultNearBut(t0, t1 int64, proc int) bool {
	for _, f := range a.faults {
		if f.name == FaultStall {
			continue // a worker's own late scheduling is far shorter than the bound
		}
		if f.start <= t1 && f.end >= t0 && (f.name != FaultKill || f.target != proc) {
			return true
		}
	}
	return false
}

// Check runs every checker and returns the first violation of each. Params
// that no checker can judge by (a semaphore of no permits) are a violation of
// their own, "params".
func (a *Analysis) Check() []Violation {
	if v := a.params(); v != nil {
		return []Violation{*v}
	}
	var vs []Violation
	lin := func() *Violation {
		timeout := a.P.LinTimeout
		if timeout <= 0 {
			timeout = 20 * time.Second
		}
		return a.Linearizable(a.P.HTML, timeout)
	}
	for _, c := range []func() *Violation{a.Exits, a.Fencing, a.Resource, a.LostWrite, a.Exclusion, a.SpuriousLoss, a.ToldFirst, a.ToldAtOnce, a.LockDelay, a.HandOff, a.Once, a.Handover, a.Recovery, a.Fairness, a.Starvation, lin, a.Liveness, a.Bitten} {
		if v := c(); v != nil {
			vs = append(vs, *v)
		}
	}
	return vs
}

// Liveness: once every holder ended and a TTL passed, nothing of the locks
// is left on the store (Params.Leftover) but what outlives them by design.
func (a *Analysis) Liveness() *Violation {
	if len(a.P.Leftover) == 0 {
		return nil
	}
	return &Violation{Checker: "liveness",
		Msg: fmt.Sprintf("keys left on the lock store after every holder ended and a TTL passed: %v", a.P.Leftover)}
}

// Exits: no worker process ends otherwise than cleanly, by the nemesis's
// kill or at the final stop: one that failed, panicked or died of another
// signal (OpExit, with the end of its log) is a violation, not a kill.
func (a *Analysis) Exits() *Violation {
	for _, e := range a.H {
		if e.Op == OpExit {
			return &Violation{Checker: "worker", Lines: []int{e.Line}, Msg: fmt.Sprintf("worker %d's process ended: %s", e.Target, e.Err)}
		}
	}
	return nil
}

// Fencing: per key, no two grants carry the same token, and of two grants
// whose order the store must have fixed the first has the smaller token. The
// store fixed it when the first completed before the second was invoked, and
// also, on a lock that one holds at a time, when the first completed before
// the second did while the second's holding was valid (its local deadline
// still ahead): the store cannot have granted the second first, for it kept
// that holding until its expiry, which comes after that deadline, and would
// have refused the first meanwhile. Only an unsafe fault or a force-unlock
// inside the second's acquisition (it may have removed the holding the
// second's reply reports) excuses a pair of the second kind; nothing excuses
// one of the first or a repeated token, but an unsafe fault between the two
// grants on a store whose tokens go back across one (Params.TokensBack).
//
// Of the keys' violations it returns the one whose last event came first.
func (a *Analysis) Fencing() *Violation {
	var first *Violation
	for key, gs := range a.grants {
		if v := a.fencing(key, gs); v != nil && (first == nil || slices.Max(v.Lines) < slices.Max(first.Lines)) {
			first = v
		}
	}
	return first
}

// fencing is Fencing on the grants gs of key.
func (a *Analysis) fencing(key string, gs []*grant) *Violation {
	byToken := map[uint64]*grant{}
	for i, b := range gs {
		if b.resumed {
			continue // the same holding: HandOff judges it
		}
		if g := byToken[b.ok.Token]; g != nil && !a.tokenBack(g, b) {
			return &Violation{Checker: "fencing", Lines: []int{g.ok.Line, b.ok.Line},
				Msg: fmt.Sprintf("key %s: token %d granted twice, to worker %d and to worker %d", key, b.ok.Token, g.ok.Proc, b.ok.Proc)}
		}
		byToken[b.ok.Token] = b
		for _, g := range gs[:i] {
			if g.ok.Token < b.ok.Token || g.resumed || a.tokenBack(g, b) {
				continue
			}
			if g.ok.T < b.inv.T {
				return &Violation{Checker: "fencing", Lines: []int{g.ok.Line, b.inv.Line, b.ok.Line},
					Msg: fmt.Sprintf("key %s: grant of token %d completed before the grant of token %d was invoked", key, g.ok.Token, b.ok.Token)}
			}
			if a.orderFixed(g, b) {
				return &Violation{Checker: "fencing", Lines: []int{b.inv.Line, g.ok.Line, b.ok.Line},
					Msg: fmt.Sprintf("key %s: grant of token %d completed while the grant of token %d was under way, and its holding was valid %v more: the store granted it first",
						key, g.ok.Token, b.ok.Token, time.Duration(b.ok.Deadline-g.ok.T).Round(time.Millisecond))}
			}
		}
	}
	return nil
}

// tokenBack reports whether the store may have handed b a token of g's or
// below it, g granted first: its tokens go back across an unsafe fault
// (Params.TokensBack), and one came between g's grant and b's.
func (a *Analysis) tokenBack(g, b *grant) bool {
	return a.P.TokensBack && a.unsafeBetween(g.ok.T, b.ok.T)
}

// orderFixed reports whether the store must have granted g before b, two
// grants whose acquisitions overlapped: g completed first, b's holding was
// valid then (its deadline after g's completion), the lock is held by one at
// a time (not a semaphore, not two readers), and no unsafe fault or
// force-unlock of the key came within b's acquisition.
func (a *Analysis) orderFixed(g, b *grant) bool {
	if a.P.Kind == "sem" || g.read && b.read || g.ok.T >= b.ok.T || b.ok.Deadline <= g.ok.T {
		return false
	}
	if a.unsafeBetween(b.inv.T, b.ok.T) {
		return false
	}
	for _, fo := range a.forces {
		if fo.ok.Key == b.ok.Key && fo.inv.T <= b.ok.T && fo.ok.T >= b.inv.T {
			return false
		}
	}
	return true
}

// sent returns a time no later than when the round trip that set the
// deadline dl began: the deadline is that start plus the TTL, minus the
// drift margin.
func (a *Analysis) sent(dl int64) int64 { return dl - int64(a.P.TTL) }

// lastTrip returns when g's last successful round trip (its acquisition's,
// or a renewal's) seen completed by t began, at the earliest.
func (a *Analysis) lastTrip(g *grant, t int64) int64 {
	s := g.inv.T
	if g.ok.Deadline != 0 {
		s = max(s, a.sent(g.ok.Deadline))
	}
	for _, r := range g.renewals {
		if r.t <= t {
			s = max(s, a.sent(r.deadline))
		}
	}
	return s
}

// lostBy reports whether g's holding may have been lost by t to a fault the
// docs name as unsafe: one that overlapped the time from g's last successful
// round trip seen by then to t. A fault that healed before a round trip
// that succeeded lost nothing of g: the store still had it after the fault.
func (a *Analysis) lostBy(g *grant, t int64) bool { return a.unsafeBetween(a.lastTrip(g, t), t) }

// renewedAfter returns the first renewal of g seen by t that began after
// from (nil: none).
func (a *Analysis) renewedAfter(g *grant, from, t int64) *renewal {
	for i, r := range g.renewals {
		if r.t <= t && a.sent(r.deadline) > from {
			return &g.renewals[i]
		}
	}
	return nil
}

// forcedOff reports whether a force-unlock excuses g's holder at t: one was
// invoked by then, and no renewal of g that began after it completed had
// succeeded by then (the store still had g after the force).
func (a *Analysis) forcedOff(g *grant, t int64) bool {
	return g.forcedBy(t) && a.renewedAfter(g, g.forceEnd, t) == nil
}

// Resource: the resource never accepts a write whose token is below one it
// accepted before the write was invoked.
func (a *Analysis) Resource() *Violation {
	type w struct{ inv, end Event }
	inv := map[string]Event{}
	acc := map[string][]w{}
	for _, e := range a.H {
		if e.Op != OpWrite {
			continue
		}
		k := opKey(e)
		if e.Type == Invoke {
			inv[k] = e
			continue
		}
		in := inv[k]
		if e.Type != OK {
			continue
		}
		for _, p := range acc[e.Key] {
			if p.end.T < in.T && e.Token < p.end.Token {
				return &Violation{Checker: "resource", Lines: []int{p.end.Line, in.Line, e.Line},
					Msg: fmt.Sprintf("key %s: write with token %d accepted after one with token %d", e.Key, e.Token, p.end.Token)}
			}
		}
		acc[e.Key] = append(acc[e.Key], w{in, e})
	}
	return nil
}

// side names a grant's side of a read-write lock, for a message.
func (g *grant) side() string {
	if g.read {
		return "read"
	}
	return "write"
}

// Exclusion: no two validity windows of a key overlap (at most N for a
// semaphore, or the size in force when the last of them was granted once it
// is resized: holders above a lowered size may go on, but nobody is granted
// a permit while they are as many as the size; on a read-write lock, a
// writer's overlaps no other holder's, readers' may overlap each other), but
// across a fault the docs name as unsafe.
func (a *Analysis) Exclusion() *Violation {
	for key, gs := range a.grants {
		for i, b := range gs {
			if a.forcedOff(b, b.ok.T) || b.end <= b.ok.T {
				// Its holding was removed by a force before its reply
				// came (the force named its token): it overlaps nobody
				// at the store, and its holder must be told at once
				// (ToldAtOnce). Or its window was over when its holder
				// saw it (its deadline passed while the reply was on
				// its way or the worker stalled): it holds nothing.
				continue
			}
			var over []*grant
			for _, g := range gs[:i] {
				if g.read && b.read {
					continue // readers share the lock
				}
				if g.ok.T < b.ok.T && g.end > b.ok.T && !a.lostBy(g, b.ok.T) && !a.forcedOff(g, b.ok.T) {
					over = append(over, g)
				}
			}
			limit := 1
			if a.P.Kind == "sem" {
				limit = a.semLimit(key, b, over)
			}
			if len(over) >= max(limit, 1) {
				g := over[0]
				msg := fmt.Sprintf("key %s: token %d granted to worker %d while %d holder(s) were valid (token %d of worker %d until %v later)",
					key, b.ok.Token, b.ok.Proc, len(over), g.ok.Token, g.ok.Proc, time.Duration(g.end-b.ok.T))
				lines := []int{g.ok.Line, b.ok.Line}
				if r := a.lastResize(key, b.ok.T); r != nil {
					msg += fmt.Sprintf(", with a size of at most %d in force", limit)
					lines = append(lines, r.inv.Line)
				}
				if a.P.Kind == "rw" {
					msg = fmt.Sprintf("key %s: the %s side granted to worker %d (token %d) while worker %d held the %s side (token %d, valid %v more)",
						key, b.side(), b.ok.Proc, b.ok.Token, g.ok.Proc, g.side(), g.ok.Token, time.Duration(g.end-b.ok.T))
				}
				return &Violation{Checker: "exclusion", Lines: lines, Msg: msg}
			}
		}
	}
	return nil
}

// SpuriousLoss: a holding is not lost before its local deadline (its Done
// firing early, from a renewal the store refused), to within a millisecond,
// unless a fault hit its worker or the store: nobody else may end it (an
// Unlock of another owner, a release without the owner check).
func (a *Analysis) SpuriousLoss() *Violation {
	margin := int64(time.Millisecond) // the history's deadline is read off two clocks
	for key, gs := range a.grants {
		for _, g := range gs {
			if g.done == 0 || g.relInv != 0 && g.relInv <= g.done || g.deadline != 0 && g.done > g.deadline-margin ||
				g.death != 0 && g.death <= g.done || g.forcedBy(g.done) || a.faultNear(g.inv.T-int64(a.P.TTL), g.done, g.ok.Proc) {
				continue
			}
			return &Violation{Checker: "spurious-loss", Lines: []int{g.ok.Line, g.doneLine},
				Msg: fmt.Sprintf("key %s: worker %d lost token %d %v before its deadline, with no fault near", key, g.ok.Proc, g.ok.Token, time.Duration(g.deadline-g.done))}
		}
	}
	return nil
}

// toldMargin is how late after its moment a Done may be seen: scheduling on
// a loaded host.
const toldMargin = int64(100 * time.Millisecond)

// ToldFirst: a holder is told (its Done fires) at its own local deadline,
// within a scheduling margin, unless it released or died before, or a fault
// that hit its worker (a stop) overlapped that moment: a holder of a
// deadline the history knows that is still holding then is checked whatever
// happened before or after. And a holder that had not released is told
// before another grant of the key completes (within the margin), unless it
// was dead, force-unlocked (until a renewal that began after the force
// succeeded), or a fault of the store that may have lost its holding came
// after its last successful round trip, or its worker was stopped from its
// deadline (or that grant) on. No fault of the network excuses either (see
// networkFaults).
func (a *Analysis) ToldFirst() *Violation {
	if v := a.toldAtDeadline(); v != nil {
		return v
	}
	if a.P.Kind == "sem" {
		return nil
	}
	for key, gs := range a.grants {
		for i, b := range gs {
			for _, g := range gs[:i] {
				if g.ok.T >= b.ok.T || g.relInv != 0 && g.relInv < b.ok.T {
					continue // released before
				}
				if g.read && b.read {
					continue // readers share the lock: nobody is told
				}
				if a.forcedOff(b, b.ok.T) || b.end <= b.ok.T {
					continue // b's own holding was forced before its reply came, or over when seen: it took nothing from g
				}
				due := b.ok.T
				if g.deadline != 0 {
					due = min(due, g.deadline)
				}
				if g.death != 0 && g.death <= b.ok.T || a.forcedOff(g, b.ok.T) || a.lostBy(g, b.ok.T) ||
					a.faultNearExcept(a.lastTrip(g, b.ok.T), b.ok.T, noProc, networkFaults) || a.procFault(due, b.ok.T+toldMargin, g.ok.Proc) {
					continue
				}
				if g.done == 0 || g.done > b.ok.T+toldMargin {
					return &Violation{Checker: "told-first", Lines: []int{g.ok.Line, b.ok.Line},
						Msg: fmt.Sprintf("key %s: worker %d (token %d) was not told before worker %d got token %d", key, g.ok.Proc, g.ok.Token, b.ok.Proc, b.ok.Token)}
				}
			}
		}
	}
	return nil
}

// noProc is a worker number no worker has: faultNear with it finds the
// faults of the store and the network alone.
const noProc = -1 << 30

// procFault reports whether a fault that hit worker proc itself (a stop, a
// kill) overlapped [t0, t1].
func (a *Analysis) procFault(t0, t1 int64, proc int) bool {
	for _, f := range a.faults {
		if f.target == proc && f.start <= t1 && f.end >= t0 {
			return true
		}
	}
	return false
}

// toldAtDeadline is ToldFirst's check of each holder against its own
// deadline.
func (a *Analysis) toldAtDeadline() *Violation {
	if len(a.H) == 0 {
		return nil
	}
	last := a.H[len(a.H)-1].T
	for key, gs := range a.grants {
		for _, g := range gs {
			d := g.deadline
			if d != 0 {
				d = max(d, g.ok.T) // a grant seen past its deadline is told once seen
			}
			if d == 0 || d+toldMargin > last || g.relInv != 0 && g.relInv <= d || g.death != 0 && g.death <= d+toldMargin ||
				g.done != 0 && g.done <= d+toldMargin || a.procFault(d, d+toldMargin, g.ok.Proc) {
				continue
			}
			told, lines := "never", []int{g.ok.Line}
			if g.done != 0 {
				told, lines = fmt.Sprintf("%v after it", time.Duration(g.done-d).Round(time.Millisecond)), append(lines, g.doneLine)
			}
			if g.relInv != 0 {
				told += fmt.Sprintf(", and it released %v after it", time.Duration(g.relInv-d).Round(time.Millisecond))
			}
			return &Violation{Checker: "told-first", Lines: lines,
				Msg: fmt.Sprintf("key %s: worker %d's token %d reached its local deadline, and its Done fired %s", key, g.ok.Proc, g.ok.Token, told)}
		}
	}
	return nil
}

// ToldAtOnce: a holder whose holding a force-unlock removed is told at once:
// its Done fires within P.Told (ToldBound) of the force's completion, rather
// than at its next renewal. It checks each force whose LockInfo named a
// holding that the history shows granted and not yet ended when the force was
// invoked (not released, told, dead, or at its local deadline, which tells it
// anyway, by then), but a force near another fault that hit its worker or the
// store (a stopped holder, a subscription cut by the network, from two TTLs
// before on) and, with P.LateWatch, a holding younger than the bound (its
// holder's watch may be starting still: a push it missed leaves it to the
// renewal, as the docs say). A holding that several holders share (a
// semaphore's permits, a read-write lock's readers) is checked for each of
// them that the force removed. And a renewal of a removed holding that began
// after the force completed never succeeds, whatever fault came near, but an
// unsafe one between them (it may have brought the holding back).
func (a *Analysis) ToldAtOnce() *Violation {
	bound := a.P.Told
	if bound <= 0 {
		bound = ToldBound(a.P.TTL)
	}
	for _, fo := range a.forces {
		for _, g := range fo.gs {
			if r := a.renewedAfter(g, fo.ok.T, math.MaxInt64); r != nil && !a.unsafeBetween(fo.inv.T, r.t) {
				return &Violation{Checker: "told-at-once", Lines: []int{g.ok.Line, fo.inv.Line, fo.ok.Line},
					Msg: fmt.Sprintf("key %s: worker %d's token %d was force-unlocked, and a renewal of it that began %v after the force succeeded",
						fo.ok.Key, g.ok.Proc, g.ok.Token, time.Duration(a.sent(r.deadline)-fo.ok.T).Round(time.Millisecond))}
			}
			// A holder cannot be told before its grant's reply came back: a
			// force of a grant whose reply was on its way counts from then.
			t, by := max(fo.ok.T, g.ok.T), max(fo.ok.T, g.ok.T)+int64(bound)
			if g.relInv != 0 && g.relInv <= t || g.done != 0 && g.done <= t || g.death != 0 && g.death <= by ||
				g.deadline != 0 && g.deadline <= by || a.P.LateWatch && fo.inv.T-g.ok.T < int64(bound) ||
				a.faultNear(fo.inv.T-2*int64(a.P.TTL), by, g.ok.Proc) {
				continue
			}
			if g.done == 0 || g.done > by {
				told := "never"
				lines := []int{g.ok.Line, fo.inv.Line, fo.ok.Line}
				if g.done != 0 {
					told = fmt.Sprintf("%v after it", time.Duration(g.done-t).Round(time.Millisecond))
					lines = append(lines, g.doneLine)
				}
				return &Violation{Checker: "told-at-once", Lines: lines,
					Msg: fmt.Sprintf("key %s: worker %d's token %d was force-unlocked, and its Done fired %s (bound %v)", fo.ok.Key, g.ok.Proc, g.ok.Token, told, bound.Round(time.Millisecond))}
			}
		}
	}
	return nil
}

// delaySlack is how much earlier than the lock-delay after its last local
// deadline the next grant may complete: the stores count in milliseconds.
const delaySlack = 2 * time.Millisecond

// LockDelay: with a lock-delay (P.Delay), a holding that ended without a
// clean release (its holder died, was stopped, was cut off, or released
// too late: ErrNotHeld) keeps the key from everybody for the delay after the
// holding's end in the store, which comes no earlier than the holder's last
// local deadline; so the next grant of the key completes no earlier than
// that deadline plus the delay, but across a fault that loses the store's
// state (the docs name them as unsafe). A release whose outcome is unknown
// (no reply, or a holder killed before it came) tells nothing, nor does a
// holding whose deadline the history does not know.
func (a *Analysis) LockDelay() *Violation {
	if a.P.Delay <= 0 || a.P.Kind == "sem" {
		return nil
	}
	for key, gs := range a.grants {
		for i, g := range gs {
			// A release counts as clean only when it was sent before the
			// holder's deadline: after it, the Client must not send it,
			// and the holding's end in the store was an expiry.
			clean := g.relInv != 0 && g.relInv < g.deadline
			if g.read || g.released != 0 && clean || g.deadline == 0 {
				continue
			}
			var b *grant // the next grant of the key
			for _, o := range gs[i+1:] {
				if o.ok.T > g.ok.T {
					b = o
					break
				}
			}
			if b == nil || clean && g.relInv < b.ok.T && !g.relFail || a.lostBy(g, b.ok.T) {
				continue
			}
			end := g.deadline
			if g.forcedBy(end) {
				end = g.forced // forced: the delay counts from the force (it ended there, or after)
			}
			if early := end + int64(a.P.Delay-delaySlack) - b.ok.T; early > 0 {
				return &Violation{Checker: "lock-delay", Lines: []int{g.ok.Line, b.ok.Line},
					Msg: fmt.Sprintf("key %s: worker %d got token %d %v after the local deadline of worker %d's token %d, which ended without a release: within the %v lock-delay",
						key, b.ok.Proc, b.ok.Token, time.Duration(b.ok.T-g.deadline), g.ok.Proc, g.ok.Token, a.P.Delay)}
			}
		}
	}
	return nil
}

// Handover (liveness): after a clean release, or the expiry of a holder that
// died holding (and its lock-delay), a waiter that goes on waiting gets the
// lock within TTL plus Bound, but across another fault.
func (a *Analysis) Handover() *Violation {
	bound := int64(a.P.TTL + a.P.Bound)
	for key, gs := range a.grants {
		for _, g := range gs {
			r, what := g.released, "released"
			if r == 0 && g.relInv == 0 && g.death != 0 && g.deadline != 0 {
				// A holder that died holding: the lock frees at its expiry,
				// which its local deadline precedes.
				r, what = max(g.death, g.deadline)+int64(a.P.Delay), "its holder died; it expired"
			}
			if r == 0 || a.faultNearBut(r-int64(a.P.TTL)-int64(6*time.Second), r+bound, g.ok.Proc) {
				continue
			}
			var waiter *acq
			for i := range a.acqs {
				w := &a.acqs[i]
				if w.inv.Key == key && w.inv.Mode != "try" && w.inv.T < r && w.end.T > r+bound {
					waiter = w
					break
				}
			}
			if waiter == nil {
				continue
			}
			next := false
			for _, o := range gs {
				if o.ok.T > g.ok.T && o.ok.T <= r+bound {
					next = true
				}
			}
			if !next {
				return &Violation{Checker: "liveness", Lines: []int{g.ok.Line, waiter.inv.Line, waiter.end.Line},
					Msg: fmt.Sprintf("key %s: granted at line %d, %s, but worker %d waited %v more without a grant", key, g.ok.Line, what, waiter.inv.Proc, time.Duration(waiter.end.T-r))}
			}
		}
	}
	return nil
}

// Recovery (liveness once the nemesis heals): from TTL plus P.Recovery after
// the last fault healed (from the start when there was none), a key that
// waiters (Lock, Do) wait for without a break gets a grant at least every TTL
// plus Bound: a holder holds for less, so a grant is due by then.
func (a *Analysis) Recovery() *Violation {
	if len(a.H) == 0 || a.P.Recovery <= 0 {
		return nil
	}
	from := a.H[0].T
	for _, f := range a.faults {
		if f.name == FaultStall {
			continue // not the store's: it does not restart the recovery
		}
		if f.end == math.MaxInt64 {
			return nil // never healed
		}
		from = max(from, f.end+int64(a.P.TTL+a.P.Recovery))
	}
	window := int64(a.P.TTL + a.P.Delay + a.P.Bound)
	grants := map[string][]int64{}
	for key, gs := range a.grants {
		for _, g := range gs {
			grants[key] = append(grants[key], g.ok.T)
		}
		slices.Sort(grants[key])
	}
	demand := map[string][]acq{}
	for _, x := range a.acqs {
		if x.inv.Mode != "try" && x.end.T > from {
			demand[x.inv.Key] = append(demand[x.inv.Key], x)
		}
	}
	for key, ds := range demand {
		sort.Slice(ds, func(i, j int) bool { return ds[i].inv.T < ds[j].inv.T })
		// Each stretch of unbroken waiting, from its start (or from) to its
		// end, and the waits that make it.
		for i := 0; i < len(ds); {
			start, end, j := max(ds[i].inv.T, from), ds[i].end.T, i+1
			for j < len(ds) && ds[j].inv.T <= end {
				end = max(end, ds[j].end.T)
				j++
			}
			last := start // the last grant, or the stretch's start
			for _, g := range append(slices.Clone(grants[key]), end) {
				if g <= last {
					continue
				}
				if min(g, end)-last > window {
					w := ds[i]
					for _, d := range ds[i:j] {
						if d.inv.T <= last {
							w = d
						}
					}
					since := "with no fault in the run"
					if len(a.faults) > 0 {
						since = fmt.Sprintf("%v after the last fault healed", time.Duration(last-from+int64(a.P.TTL+a.P.Recovery)).Round(time.Millisecond))
					}
					return &Violation{Checker: "recovery", Lines: []int{w.inv.Line, w.end.Line},
						Msg: fmt.Sprintf("key %s: waited for without a break, no grant for %v (more than TTL %v plus %v), %s",
							key, time.Duration(min(g, end)-last).Round(time.Millisecond), a.P.TTL, a.P.Bound, since)}
				}
				last = g
				if g >= end {
					break
				}
			}
			i = j
		}
	}
	return nil
}

// Starvation: no worker starves while the others are served. Jain's index of
// the grants per worker, over every worker that tried to take a lock (one
// that never got one counts with none), stays at 0.5 or more (one half of the
// workers getting everything) once there are grants enough to tell; and no
// worker that waited (Lock, Do) has every wait fail while others were granted
// the key it waited for, twice or more away from faults that hit it or the
// store.
func (a *Analysis) Starvation() *Violation {
	if a.Stats.Grants >= 20 && a.Stats.Jain < 0.5 {
		return &Violation{Checker: "fairness", Msg: fmt.Sprintf("grants spread unfairly over the workers: Jain's index %.2f over %d grants", a.Stats.Jain, a.Stats.Grants)}
	}
	type waits struct {
		granted bool
		passed  []acq // failed waits while another worker was granted the key
	}
	by := map[int]*waits{}
	for _, x := range a.acqs {
		if x.inv.Proc < 0 || x.inv.Mode == "try" {
			continue
		}
		w := by[x.inv.Proc]
		if w == nil {
			w = &waits{}
			by[x.inv.Proc] = w
		}
		if x.end.Type == OK {
			w.granted = true
			continue
		}
		if x.end.Type != Fail || a.faultNear(x.inv.T, x.end.T, x.inv.Proc) {
			continue
		}
		for _, g := range a.grants[x.inv.Key] {
			if g.ok.Proc != x.inv.Proc && g.ok.T > x.inv.T && g.ok.T < x.end.T {
				w.passed = append(w.passed, x)
				break
			}
		}
	}
	procs := slices.Sorted(maps.Keys(by))
	for _, p := range procs {
		if w := by[p]; !w.granted && len(w.passed) >= 2 {
			x := w.passed[len(w.passed)-1]
			return &Violation{Checker: "fairness", Lines: []int{x.inv.Line, x.end.Line},
				Msg: fmt.Sprintf("worker %d never got a lock: %d of its waits failed while other workers were granted the key it waited for", p, len(w.passed))}
		}
	}
	return nil
}

// Fairness: on the fair lock, waiters of a key are served in arrival order
// (with a margin for the first round trip), but across a fault that came
// while the earlier one waited and hit one of the two or the store (its
// network included): a fault of another worker leaves their order alone.
func (a *Analysis) Fairness() *Violation {
	v, _, _ := a.fairOrder()
	return v
}

// fairOrder judges the fair lock's order of service (see Fairness): the first
// violation, and how many pairs of waiters it judged (the earlier arrived
// well before the later, which arrived before the earlier was served) and
// of those how many a fault excused.
func (a *Analysis) fairOrder() (v *Violation, judged, excused int) {
	if a.P.Kind != "fair" {
		return nil, 0, 0
	}
	margin := int64(100 * time.Millisecond)
	for i := range a.acqs {
		x := &a.acqs[i]
		for j := range a.acqs {
			y := &a.acqs[j]
			if x.inv.Key != y.inv.Key || x.inv.Mode == "try" || y.inv.Mode == "try" || x.end.Type != OK || y.end.Type != OK ||
				x.inv.T+margin >= y.inv.T || y.inv.T >= x.end.T {
				continue
			}
			// x arrived well before y, both waited (y arrived before x
			// was served).
			judged++
			if a.faultNear(x.inv.T, x.end.T, x.inv.Proc) || a.procFault(x.inv.T, x.end.T, y.inv.Proc) {
				excused++
				continue
			}
			if y.end.Token < x.end.Token && v == nil { // y was served first
				v = &Violation{Checker: "fairness", Lines: []int{x.inv.Line, y.inv.Line, y.end.Line, x.end.Line},
					Msg: fmt.Sprintf("key %s: worker %d arrived %v after worker %d and was served first", x.inv.Key, y.inv.Proc, time.Duration(y.inv.T-x.inv.T), x.inv.Proc)}
			}
		}
	}
	return v, judged, excused
}

// register is the resource as a register fenced by tokens: a write is applied
// when its token is not below the highest applied.
type register struct {
	value int64
	token uint64
}

type regInput struct {
	write bool
	token uint64
	value int64
}

type regOutput struct {
	value   int64
	outcome string // ok, fail, info
}

// registerModel is the model porcupine checks the resource's history against.
var registerModel = porcupine.NondeterministicModel{
	Partition: func(ops []porcupine.Operation) [][]porcupine.Operation {
		m := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range ops {
			k := op.Metadata.(string)
			if _, ok := m[k]; !ok {
				keys = append(keys, k)
			}
			m[k] = append(m[k], op)
		}
		sort.Strings(keys)
		var out [][]porcupine.Operation
		for _, k := range keys {
			out = append(out, m[k])
		}
		return out
	},
	Init: func() []any { return []any{register{}} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(register), input.(regInput), output.(regOutput)
		if !in.write {
			if out.outcome == Info || out.value == s.value {
				return []any{s}
			}
			return nil
		}
		fits := in.token >= s.token
		applied := register{value: in.value, token: in.token}
		switch {
		case out.outcome == Info && fits:
			return []any{s, applied}
		case out.outcome == Info, out.outcome == Fail && !fits:
			return []any{s}
		case out.outcome == OK && fits:
			return []any{applied}
		}
		return nil
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(regInput), output.(regOutput)
		if !in.write {
			return fmt.Sprintf("read -> %d (%s)", out.value, out.outcome)
		}
		return fmt.Sprintf("write %d token %d -> %s", in.value, in.token, out.outcome)
	},
	DescribeState: func(state any) string {
		s := state.(register)
		return fmt.Sprintf("%d (token %d)", s.value, s.token)
	},
}

// Linearizable checks the resource's history as a fenced register per key with
// porcupine; on a failure it writes the visualization to htmlPath (when not
// empty). A history porcupine could not decide within timeout fails too: it
// is not proven linearizable.
func (a *Analysis) Linearizable(htmlPath string, timeout time.Duration) *Violation {
	if len(a.H) == 0 {
		return nil // an empty history is linearizable
	}
	var ops []porcupine.Operation
	inv := map[string]Event{}
	end := a.H[len(a.H)-1].T + 1
	for _, e := range a.H {
		if e.Op != OpRead && e.Op != OpWrite {
			continue
		}
		k := opKey(e)
		if e.Type == Invoke {
			inv[k] = e
			continue
		}
		in := inv[k]
		delete(inv, k)
		ret := e.T
		if e.Type == Info {
			ret = end
		}
		ops = append(ops, porcupine.Operation{ClientId: clientID(in.Proc), Call: in.T, Return: ret, Metadata: in.Key,
			Input:  regInput{write: in.Op == OpWrite, token: in.Token, value: in.Value},
			Output: regOutput{value: e.Value, outcome: e.Type}})
	}
	for _, in := range inv { // invoked, never completed: a killed worker
		if in.Op == OpWrite {
			ops = append(ops, porcupine.Operation{ClientId: clientID(in.Proc), Call: in.T, Return: end, Metadata: in.Key,
				Input: regInput{write: true, token: in.Token, value: in.Value}, Output: regOutput{outcome: Info}})
		}
	}
	model := registerModel.ToModel()
	res, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
	switch res {
	case porcupine.Ok:
		return nil
	case porcupine.Unknown:
		return &Violation{Checker: "linearizable", Msg: fmt.Sprintf("not proven: porcupine could not decide the resource's history (%d operations) within %v", len(ops), timeout)}
	}
	msg := "the resource's history is not linearizable as a fenced register"
	if htmlPath != "" {
		if err := porcupine.VisualizePath(model, info, htmlPath); err == nil {
			msg += " (see " + htmlPath + ")"
		}
	}
	return &Violation{Checker: "linearizable", Msg: msg}
}

// harnessClient is porcupine's client number of the test process (Proc -1),
// whose final reads the history holds.
const harnessClient = 1000

// clientID is porcupine's client number of worker proc.
func clientID(proc int) int {
	if proc < 0 {
		return harnessClient
	}
	return proc
}

// LostWrite: no acknowledged write of the resource is lost. Every read that
// completed (a holder's, and the harness's final read of each key once the
// workers ended) returns the value of the write of the highest token
// acknowledged before the read began, or of one that may have been applied
// after it: a write whose token is not below it, acknowledged or of unknown
// outcome, that began before the read ended. It names the write a read missed.
// A key whose final reads (the harness's) all failed fails too: a write it
// lost would not show.
func (a *Analysis) LostWrite() *Violation {
	type write struct {
		inv, end Event // end.Type "": never completed (its worker died)
	}
	inv := map[string]Event{}
	pending := map[string]*write{}
	byKey := map[string][]*write{}
	final := map[string]*Event{} // per key, the harness's last final read (its completion, or its invocation)
	for i, e := range a.H {
		if e.Op != OpWrite && e.Op != OpRead {
			continue
		}
		if e.Proc < 0 && e.Op == OpRead {
			if f := final[e.Key]; f == nil || f.Type != OK {
				final[e.Key] = &a.H[i]
			}
		}
		k := fmt.Sprint(e.Proc, "/", e.PID, "/", e.ID)
		if e.Type == Invoke {
			inv[k] = e
			if e.Op == OpWrite {
				w := &write{inv: e}
				pending[k] = w
				byKey[e.Key] = append(byKey[e.Key], w)
			}
			continue
		}
		in, ok := inv[k]
		if !ok {
			continue
		}
		delete(inv, k)
		if e.Op == OpWrite {
			if w := pending[k]; w != nil {
				w.end = e
				delete(pending, k)
			}
			continue
		}
		if e.Type != OK {
			continue
		}
		// The last write acknowledged before the read began: the highest
		// token, the latest acknowledgement among equal tokens.
		var last *write
		for _, w := range byKey[e.Key] {
			if w.end.Type == OK && w.end.T < in.T && (last == nil || w.inv.Token > last.inv.Token ||
				w.inv.Token == last.inv.Token && w.end.T > last.end.T) {
				last = w
			}
		}
		fits := last == nil && e.Value == 0 || last != nil && last.inv.Value == e.Value
		for _, w := range byKey[e.Key] {
			switch {
			case fits:
			case w == last, w.end.Type == Fail, w.inv.T > e.T:
			case last != nil && w.inv.Token < last.inv.Token:
				// The resource refuses it once last is applied.
			case last != nil && w.end.Type == OK && w.end.T < last.inv.T:
				// Applied before last began.
			default:
				fits = w.inv.Value == e.Value
			}
		}
		if fits {
			continue
		}
		who := fmt.Sprintf("worker %d's", e.Proc)
		if e.Proc < 0 {
			who = "the final"
		}
		if last == nil {
			return &Violation{Checker: "lost-write", Lines: []int{in.Line, e.Line},
				Msg: fmt.Sprintf("key %s: %s read at line %d returned %d, which no write that began before it wrote", e.Key, who, e.Line, e.Value)}
		}
		return &Violation{Checker: "lost-write", Lines: []int{last.inv.Line, last.end.Line, in.Line, e.Line},
			Msg: fmt.Sprintf("key %s: the write of %d with token %d by worker %d, acknowledged at line %d, is lost: %s read at line %d returned %d",
				e.Key, last.inv.Value, last.inv.Token, last.inv.Proc, last.end.Line, who, e.Line, e.Value)}
	}
	for _, k := range slices.Sorted(maps.Keys(final)) {
		if f := final[k]; f.Type != OK {
			return &Violation{Checker: "lost-write", Lines: []int{f.Line},
				Msg: fmt.Sprintf("key %s: no final read succeeded (%s), so a lost write would not show", k, f.Err)}
		}
	}
	return nil
}
