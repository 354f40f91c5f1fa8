package verify

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/dlock-go/dlock"
)

// The Once workload (Spec.Workload WorkloadOnce): every worker calls
// dlock.Once's Do on a few keys, again and again, with pauses of up to the
// result's TTL between calls so that some land in a new result window; the
// computation draws a value no other computation draws, takes up to Hold,
// and now and then exits its process before it returns. The nemesis kills,
// stops and cuts off workers (computers among them) meanwhile.
// Analysis.Once judges the history.

// Operations of the Once workload.
const (
	// OpOnce is a call of Once.Do (Value: the value it returned; Mode
	// "computed" when this call's own computation produced it).
	OpOnce = "once"
	// OpCompute is a computation under Once.Do (Value: the value it
	// produces; completed Info when its lock was lost meanwhile).
	OpCompute = "compute"
)

// onceMargin is how much of a result's window the stores' clocks and
// milliseconds may take off.
const onceMargin = int64(5 * time.Millisecond)

// onceRound is one call of Once.Do and the pause after it.
func (w *worker) onceRound(ctx context.Context) {
	key := w.s.Keys[w.rng.IntN(len(w.s.Keys))]
	o := dlock.Once{Client: w.client, ResultTTL: w.s.ResultTTL, Options: []dlock.Option{dlock.WithTTL(w.s.TTL)}}
	id := w.rec.NextID()
	w.rec.Record(Event{Op: OpOnce, Type: Invoke, ID: id, Key: key})
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.s.Wait)
	var computed int64
	v, err := o.Do(cctx, key, func(lctx context.Context) ([]byte, error) {
		w.seq++
		val := int64(w.s.Proc+1)<<40 | int64(w.s.Life)<<24 | w.seq
		cid := w.rec.NextID()
		w.rec.Record(Event{Op: OpCompute, Type: Invoke, ID: cid, Key: key, Value: val})
		w.pause(lctx, w.s.Hold) // a lost lock ends the computation early
		if w.s.shared == nil && w.rng.Float64() < w.s.ExitProb {
			w.rec.Record(Event{Op: "exit", Key: key})
			os.Exit(0)
		}
		typ := OK
		if lctx.Err() != nil {
			typ = Info // the lock was lost: the value may not be stored
		}
		w.rec.Record(Event{Op: OpCompute, Type: typ, ID: cid, Key: key, Value: val, Err: errText(context.Cause(lctx))})
		computed = val
		return []byte(strconv.FormatInt(val, 10)), nil
	})
	cancel()
	e := Event{Op: OpOnce, Type: OK, ID: id, Key: key}
	switch n, perr := strconv.ParseInt(string(v), 10, 64); {
	case err != nil:
		e.Type, e.Err = Info, errText(err)
	case perr != nil:
		e.Err = errText(fmt.Errorf("not a computed value: %q", v))
	default:
		e.Value = n
		if n == computed {
			e.Mode = "computed"
		}
	}
	w.rec.Record(e)
	w.pause(ctx, w.s.ResultTTL)
}

// onceOp is an operation of the Once workload and its completion (nil: none
// recorded).
type onceOp struct {
	inv Event
	end *Event
}

// onceOps pairs the invocations of op in h with their completions.
func onceOps(h []Event, op string) []onceOp {
	var ops []onceOp
	open := map[string]int{}
	for i := range h {
		e := &h[i]
		if e.Op != op {
			continue
		}
		if e.Type == Invoke {
			open[opKey(*e)] = len(ops)
			ops = append(ops, onceOp{inv: *e})
		} else if j, ok := open[opKey(*e)]; ok {
			ops[j].end = e
		}
	}
	return ops
}

// Once judges the Once workload: every value a Do returned is one that a
// computation of its key produced, begun before it returned, and whose
// result window (P.ResultMax from the end of the Do that stored it, when
// given) had not ended when the Do began; and a key is computed at most once
// per result window: no computation begins while another of the key is
// under way, nor within P.ResultTTL of the end of one whose Do stored its
// value, unless the other's computer died or lost its lock (its process was
// killed, exited, stopped, or a fault of the store or the network or a
// force-unlock came near), or a fault the docs name as unsafe may have lost
// the stored result.
func (a *Analysis) Once() *Violation {
	comps := onceOps(a.H, OpCompute)
	byValue := map[int64]*onceOp{}
	for i := range comps {
		byValue[comps[i].inv.Value] = &comps[i]
	}
	stored := map[int64]*Event{} // a computation's value: the end of the Do that stored it
	calls := onceOps(a.H, OpOnce)
	for _, c := range calls {
		if c.end != nil && c.end.Type == OK && c.end.Mode == "computed" {
			stored[c.end.Value] = c.end
		}
	}
	for _, c := range calls {
		if c.end == nil || c.end.Type != OK {
			continue
		}
		p := byValue[c.end.Value]
		if p == nil || p.inv.Key != c.inv.Key || p.inv.T > c.end.T {
			return &Violation{Checker: "once", Lines: []int{c.inv.Line, c.end.Line},
				Msg: fmt.Sprintf("key %s: worker %d's Do returned %d (%s), which no computation of the key produced", c.inv.Key, c.inv.Proc, c.end.Value, c.end.Err)}
		}
		if s := stored[c.end.Value]; s != nil && a.P.ResultMax > 0 && c.inv.T > s.T+int64(a.P.ResultMax)+onceMargin {
			return &Violation{Checker: "once", Lines: []int{s.Line, c.inv.Line, c.end.Line},
				Msg: fmt.Sprintf("key %s: worker %d's Do returned %d, stored %v before it began, past the result's window of %v", c.inv.Key, c.inv.Proc, c.end.Value,
					time.Duration(c.inv.T-s.T).Round(time.Millisecond), a.P.ResultMax)}
		}
	}
	for i, c2 := range comps {
		for _, c1 := range comps[:i] {
			if c1.inv.Key != c2.inv.Key || c1.inv.T >= c2.inv.T {
				continue
			}
			var why string
			switch {
			case c1.end == nil || c1.end.T > c2.inv.T:
				why = "while it was under way"
			case stored[c1.inv.Value] != nil && c2.inv.T < c1.end.T+int64(a.P.ResultTTL)-onceMargin:
				why = fmt.Sprintf("%v after it ended and its value was stored", time.Duration(c2.inv.T-c1.end.T).Round(time.Millisecond))
			default:
				continue
			}
			if a.computerLost(c1, c2.inv.T) {
				continue
			}
			lines := []int{c1.inv.Line, c2.inv.Line}
			if c1.end != nil {
				lines = []int{c1.inv.Line, c1.end.Line, c2.inv.Line}
			}
			return &Violation{Checker: "once", Lines: lines,
				Msg: fmt.Sprintf("key %s: worker %d computed again %s by worker %d, whose lock was not lost", c2.inv.Key, c2.inv.Proc, why, c1.inv.Proc)}
		}
	}
	return nil
}

// computerLost reports whether the computation c may have lost its lock, or
// its stored value, by t: it completed knowing its lock lost, or its process
// died (killed, exited, started again) by t, or a fault hit its worker, the
// store or the network, or a force-unlock of its key came, from a TTL before
// it began to t, or an unsafe fault may have lost its stored value.
func (a *Analysis) computerLost(c onceOp, t int64) bool {
	if c.end != nil && c.end.Type != OK || a.faultNear(c.inv.T-int64(a.P.TTL), t, c.inv.Proc) || a.unsafeBetween(c.inv.T, t) {
		return true
	}
	for _, e := range a.H {
		if e.T > t {
			break
		}
		if e.T < c.inv.T {
			continue
		}
		switch {
		case (e.Op == "exit" || e.Op == OpStart) && e.Proc == c.inv.Proc && e.PID != c.inv.PID,
			e.Op == "exit" && e.Proc == c.inv.Proc,
			e.Op == OpExit && e.Target == c.inv.Proc,
			e.Op == OpNemesis && e.Fault == FaultForce && e.Type == Invoke:
			return true
		}
	}
	return false
}
