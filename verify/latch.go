package verify

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
)

// The latch and barrier workload: worker processes count down a latch, wait
// for it, or pass a double barrier, one operation each, while the test kills
// and pauses them; Analysis.Latch and Analysis.Barrier judge the history.

// Operations of the latch and barrier workload.
const (
	OpCountDown = "count-down" // Latch.CountDown (Value: the count left)
	OpWait      = "wait"       // Latch.Wait
	OpEnter     = "enter"      // Barrier.Enter
	OpLeave     = "leave"      // Barrier.Leave
)

// Roles of a latch and barrier worker.
const (
	RoleCountDown = "count-down"
	RoleWait      = "wait"
	RoleParty     = "party"
)

// SyncSpec is one latch or barrier worker: its store, its role, and the
// latch or barrier it uses.
type SyncSpec struct {
	Backend string   // redis, etcd, postgres
	Addr    []string // the store's addresses (postgres: its URL)
	Role    string   // RoleCountDown, RoleWait, RoleParty
	Name    string   // the latch's or barrier's name
	N       int      // the latch's count, the barrier's parties
	TTL     time.Duration
	Timeout time.Duration // bounds each wait
	Hold    time.Duration // a party's longest stay inside the barrier
	Seed    uint64
	Dir     string // the history's directory
	Proc    int
}

// RunSyncWorker does s's one operation (a party: Enter, a stay, Leave) with
// d, the latch and barrier driver of s's store, and records it in the
// history.
func RunSyncWorker(ctx context.Context, s SyncSpec, d driver.SyncDriver) error {
	rec, err := NewRecorder(filepath.Join(s.Dir, fmt.Sprintf("s%02d.jsonl", s.Proc)), s.Proc)
	if err != nil {
		return err
	}
	defer rec.Close()
	rec.Record(Event{Op: OpStart})
	rng := rand.New(rand.NewPCG(s.Seed, uint64(s.Proc)))
	if s.Role != RoleWait {
		// Count-downs and arrivals come at random moments: waiters wait,
		// and faults land while they do.
		time.Sleep(time.Duration(rng.Int64N(int64(s.Hold) + 1)))
	}
	// op records one operation around call.
	op := func(name string, call func(context.Context) (int64, error)) error {
		id := rec.NextID()
		rec.Record(Event{Op: name, Type: Invoke, ID: id, Key: s.Name})
		cctx, cancel := context.WithTimeout(ctx, s.Timeout)
		v, err := call(cctx)
		cancel()
		typ := OK
		if err != nil {
			typ = Fail
			if name == OpCountDown {
				typ = Info // it may have counted
			}
		}
		rec.Record(Event{Op: name, Type: typ, ID: id, Key: s.Name, Value: v, Err: errText(err)})
		return err
	}
	switch s.Role {
	case RoleCountDown, RoleWait:
		l, err := dlock.NewLatch(d, s.Name, s.N, time.Minute)
		if err != nil {
			return err
		}
		if s.Role == RoleWait {
			_ = op(OpWait, func(ctx context.Context) (int64, error) { return 0, l.Wait(ctx) })
			return nil // the history has the outcome
		}
		_ = op(OpCountDown, func(ctx context.Context) (int64, error) {
			left, err := l.CountDown(ctx)
			return int64(left), err
		})
		return nil
	case RoleParty:
		b, err := dlock.NewBarrier(d, s.Name, s.N, s.TTL)
		if err != nil {
			return err
		}
		if err := op(OpEnter, func(ctx context.Context) (int64, error) { return 0, b.Enter(ctx) }); err != nil {
			return nil
		}
		time.Sleep(time.Duration(rng.Int64N(int64(s.Hold) + 1)))
		_ = op(OpLeave, func(ctx context.Context) (int64, error) { return 0, b.Leave(ctx) })
		return nil
	}
	return fmt.Errorf("verify: unknown role %q", s.Role)
}

// syncOps pairs the invocations of h with their completions: by process, the
// invocation time and the completion (nil when the process died first).
type syncOp struct {
	proc   int
	invoke int64
	done   *Event
}

func syncOps(h []Event, op string) []syncOp {
	var ops []syncOp
	open := map[[2]int64]int{}
	for i := range h {
		e := &h[i]
		if e.Op != op {
			continue
		}
		k := [2]int64{int64(e.Proc), e.ID}
		if e.Type == Invoke {
			open[k] = len(ops)
			ops = append(ops, syncOp{proc: e.Proc, invoke: e.T})
		} else if j, ok := open[k]; ok {
			ops[j].done = e
		}
	}
	return ops
}

// killedAt returns when each worker was killed (from the nemesis events).
func killedAt(h []Event) map[int]int64 {
	k := map[int]int64{}
	for _, e := range h {
		if e.Op == OpNemesis && e.Fault == "kill" {
			k[e.Target] = e.T
		}
	}
	return k
}

// pausedAfter reports whether worker proc was paused at t or after.
func pausedAfter(h []Event, proc int, t int64) bool {
	for _, e := range h {
		if e.Op == OpNemesis && e.Fault == "pause" && e.Target == proc && e.T >= t {
			return true
		}
	}
	return false
}

// syncWake is how soon after a latch opens a Wait that was waiting returns:
// its notification, and scheduling on a loaded host.
const syncWake = time.Second

// Latch judges the history as one latch of count n: no Wait returns before
// the count-down that brought the count to zero was invoked (or, when none is
// known to have, before n count-downs were); no Wait fails for a timeout that
// began after a count-down had brought the count to zero, nor one that was
// waiting when the latch opened and failed more than syncWake later, but
// for a pause of its worker (a lost wake-up); and the counts the
// count-downs returned are a count-down's: each in [0, n), each above zero
// returned once, and a count-down that completed before another was invoked
// returned more, or both zero.
func (a *Analysis) Latch(n int) []Violation {
	h := a.H
	var bad []Violation
	add := func(lines []int, format string, args ...any) {
		bad = append(bad, Violation{Checker: "latch", Lines: lines, Msg: fmt.Sprintf(format, args...)})
	}
	downs := syncOps(h, OpCountDown)
	var zero *syncOp // the first count-down known to have reached zero
	seen := map[int64]*Event{}
	for i := range downs {
		d := downs[i].done
		if d == nil || d.Type != OK {
			continue
		}
		if d.Value == 0 && (zero == nil || downs[i].invoke < zero.invoke) {
			zero = &downs[i]
		}
		if d.Value < 0 || d.Value >= int64(n) {
			add([]int{d.Line}, "latch: worker %d's count-down returned %d, outside [0, %d)", downs[i].proc, d.Value, n)
		} else if o := seen[d.Value]; o != nil && d.Value > 0 {
			add([]int{o.Line, d.Line}, "latch: two count-downs returned %d (lines %d and %d)", d.Value, o.Line, d.Line)
		}
		seen[d.Value] = d
		for _, o := range downs {
			if o.done != nil && o.done.Type == OK && o.done.T < downs[i].invoke && o.done.Value <= d.Value && o.done.Value > 0 {
				add([]int{o.done.Line, d.Line}, "latch: a count-down returned %d after one that completed before it began returned %d", d.Value, o.done.Value)
			}
		}
	}
	for _, w := range syncOps(h, OpWait) {
		if w.done == nil {
			continue // killed
		}
		switch w.done.Type {
		case OK:
			invoked := 0
			for _, d := range downs {
				if d.invoke < w.done.T {
					invoked++
				}
			}
			if zero != nil && zero.invoke > w.done.T || invoked < n {
				add([]int{w.done.Line}, "latch: worker %d's Wait returned (line %d) before the latch reached zero (%d count-downs invoked before)", w.proc, w.done.Line, invoked)
			}
		case Fail:
			switch {
			case zero == nil:
			case zero.done.T < w.invoke:
				add([]int{w.done.Line}, "latch: worker %d's Wait failed (line %d: %s) although the latch was open when it began", w.proc, w.done.Line, w.done.Err)
			case w.done.T > zero.done.T+int64(syncWake) && !pausedAfter(h, w.proc, w.invoke):
				add([]int{zero.done.Line, w.done.Line}, "latch: worker %d's Wait failed (line %d: %s) %v after the latch opened (line %d): a lost wake-up",
					w.proc, w.done.Line, w.done.Err, time.Duration(w.done.T-zero.done.T).Round(time.Millisecond), zero.done.Line)
			}
		}
	}
	return bad
}

// Barrier judges the history as one round of a double barrier of n parties
// of a TTL of P.TTL: no Enter returns before n parties had arrived (invoked
// Enter, and not failed nor been killed a TTL and a scheduling margin
// before: an arrival that is not taken back lapses a TTL after its last
// renewal);
// if one party passed, every party that was not killed passed (all or none);
// and no Leave returns before every party that entered has invoked Leave or
// been killed.
func (a *Analysis) Barrier(n int) []Violation {
	h := a.H
	var bad []Violation
	add := func(lines []int, format string, args ...any) {
		bad = append(bad, Violation{Checker: "barrier", Lines: lines, Msg: fmt.Sprintf(format, args...)})
	}
	killed := killedAt(h)
	enters, leaves := syncOps(h, OpEnter), syncOps(h, OpLeave)
	var passed, failed []int
	for _, e := range enters {
		switch {
		case e.done == nil:
		case e.done.Type == OK:
			passed = append(passed, e.proc)
			arrived := 0
			for _, o := range enters {
				gone := int64(math.MaxInt64) // when its arrival was gone, at the latest
				if k, ok := killed[o.proc]; ok {
					gone = k
				}
				if o.done != nil && o.done.Type != OK {
					gone = min(gone, o.done.T)
				}
				if o.invoke < e.done.T && (gone == math.MaxInt64 || gone+int64(a.P.TTL)+toldMargin >= e.done.T) {
					arrived++
				}
			}
			if arrived < n {
				add([]int{e.done.Line}, "barrier: worker %d entered (line %d) with %d of %d parties arrived", e.proc, e.done.Line, arrived, n)
			}
		default:
			failed = append(failed, e.proc)
		}
	}
	if len(passed) > 0 && len(failed) > 0 {
		add(nil, "barrier: workers %v passed and workers %v did not (all or none)", passed, failed)
	}
	for _, l := range leaves {
		if l.done == nil || l.done.Type != OK {
			continue
		}
		for _, p := range passed {
			gone := false
			if t, ok := killed[p]; ok && t < l.done.T {
				gone = true
			}
			if i := slices.IndexFunc(leaves, func(o syncOp) bool { return o.proc == p }); i >= 0 && leaves[i].invoke < l.done.T {
				gone = true
			}
			if !gone {
				add([]int{l.done.Line}, "barrier: worker %d left (line %d) while worker %d was still inside", l.proc, l.done.Line, p)
			}
		}
	}
	return bad
}
