package verify

import (
	"testing"
	"time"
)

// detachEvents is worker p's Detach of token tok at t.
func detachEvents(p int, id int64, t int64, tok uint64) []Event {
	return []Event{
		{T: ms(t), Proc: p, Op: OpDetach, Type: Invoke, ID: id, Key: "k", Token: tok},
		{T: ms(t + 1), Proc: p, Op: OpDetach, Type: OK, ID: id, Key: "k", Token: tok},
	}
}

// resumeEvents is worker p's Resume of token tok, invoked at t, resumed 1 ms
// later with its deadline at t+dl ms.
func resumeEvents(p int, id int64, t int64, tok uint64, dl int64) []Event {
	return []Event{
		{T: ms(t), Proc: p, Op: OpResume, Type: Invoke, ID: id, Key: "k", Token: tok},
		{T: ms(t + 1), Proc: p, Op: OpResume, Type: OK, ID: id, Key: "k", Token: tok, Deadline: ms(t + dl)},
	}
}

// cleanHandOff is a clean hand-over: worker 0 takes token 10 and detaches it at
// 100 ms, worker 1 resumes it at 150 ms and releases it at 250 ms.
func cleanHandOff() []Event {
	return cat(grantEvents(0, 1, 0, 10, 400), detachEvents(0, 2, 100, 10), resumeEvents(1, 1, 150, 10, 540), releaseEvents(1, 2, 250))
}

// TestHandOffPassesACleanHandOver: every checker passes a holding handed
// over and released, and a worker that takes the lock after it.
func TestHandOffPassesACleanHandOver(t *testing.T) {
	h := cat(cleanHandOff(), grantEvents(2, 1, 300, 11, 400), releaseEvents(2, 2, 350))
	if vs := Analyze(h, checkParams).Check(); len(vs) != 0 {
		t.Fatalf("violations in a clean hand-over: %+v", vs)
	}
}

// TestHandOffCatches: the checkers fail a Resume after the holding's TTL, one
// after a newer grant, a detached lease renewed, a resumed holding that
// overlaps another, and one not told before the next grant.
func TestHandOffCatches(t *testing.T) {
	for _, tc := range []struct {
		name    string
		h       []Event
		checker func(a *Analysis) *Violation
	}{
		{"late", cat(grantEvents(0, 1, 0, 10, 400), detachEvents(0, 2, 100, 10), resumeEvents(1, 1, 900, 10, 1300), releaseEvents(1, 2, 950)),
			(*Analysis).HandOff},
		{"superseded", cat(grantEvents(0, 1, 0, 10, 400), detachEvents(0, 2, 100, 10), grantEvents(2, 1, 120, 11, 520), releaseEvents(2, 2, 140),
			resumeEvents(1, 1, 150, 10, 540), releaseEvents(1, 2, 250)), (*Analysis).HandOff},
		{"renewed after detach", cat(cleanHandOff(), []Event{{T: ms(140), Proc: 0, Op: OpDetachedRenewal, Key: "k", Token: 10}}),
			(*Analysis).HandOff},
		{"never detached", cat(grantEvents(0, 1, 0, 10, 400), resumeEvents(1, 1, 150, 10, 540), releaseEvents(1, 2, 250)),
			(*Analysis).HandOff},
		{"overlap", cat(cleanHandOff()[:6], grantEvents(2, 1, 200, 11, 600), releaseEvents(2, 2, 260)), (*Analysis).Exclusion},
		{"not told", cat(cleanHandOff()[:6], grantEvents(2, 1, 600, 11, 1000), releaseEvents(2, 2, 650)), (*Analysis).ToldFirst},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if v := tc.checker(Analyze(tc.h, checkParams)); v == nil {
				t.Fatal("not caught")
			} else {
				t.Log(v.Format(tc.h))
			}
		})
	}
	// A store that keeps a detached holding longer (Params.Detached: etcd's
	// shared lease) has it resumed later, but within that time only.
	late := cat(grantEvents(0, 1, 0, 10, 400), detachEvents(0, 2, 100, 10), resumeEvents(1, 1, 900, 10, 1300), releaseEvents(1, 2, 950))
	p := checkParams
	p.Detached = time.Second
	if v := Analyze(late, p).HandOff(); v != nil {
		t.Errorf("a resume within Params.Detached failed: %s", v.Msg)
	}
	p.Detached = 700 * time.Millisecond
	if v := Analyze(late, p).HandOff(); v == nil {
		t.Error("a resume past Params.Detached not caught")
	}
	// The clean hand-over's segments are one holding, not two grants of
	// one token.
	if v := Analyze(cleanHandOff(), checkParams).Fencing(); v != nil {
		t.Errorf("fencing failed a hand-over: %s", v.Msg)
	}
}

var onceParams = Params{Kind: "plain", TTL: 400 * time.Millisecond, ResultTTL: 800 * time.Millisecond, ResultMax: 800 * time.Millisecond}

// onceCall is worker p's Do, invoked at t and returning v at end (Mode
// "computed" when computed).
func onceCall(p int, id int64, t, end int64, v int64, computed bool) []Event {
	e := Event{T: ms(end), Proc: p, Op: OpOnce, Type: OK, ID: id, Key: "k", Value: v}
	if computed {
		e.Mode = "computed"
	}
	return []Event{{T: ms(t), Proc: p, Op: OpOnce, Type: Invoke, ID: id, Key: "k"}, e}
}

// computeEvents is worker p's computation of v from t to end (end 0: it
// never ended).
func computeEvents(p int, id int64, t, end int64, v int64) []Event {
	h := []Event{{T: ms(t), Proc: p, Op: OpCompute, Type: Invoke, ID: id, Key: "k", Value: v}}
	if end != 0 {
		h = append(h, Event{T: ms(end), Proc: p, Op: OpCompute, Type: OK, ID: id, Key: "k", Value: v})
	}
	return h
}

// onceWindow is one result window: worker 0 computes 7 from 10 to 100 ms
// and stores it by 110 ms; workers 1 and 2 wait and get it.
func onceWindow() []Event {
	return cat(onceCall(0, 1, 0, 110, 7, true), computeEvents(0, 2, 10, 100, 7),
		onceCall(1, 1, 5, 115, 7, false), onceCall(2, 1, 50, 116, 7, false))
}

// TestOncePassesOneComputationPerWindow: a window's callers get its value,
// a call after the window computes again, and a computation whose computer
// was killed is taken over.
func TestOncePassesOneComputationPerWindow(t *testing.T) {
	h := cat(onceWindow(), onceCall(1, 2, 1000, 1110, 8, true), computeEvents(1, 3, 1010, 1100, 8), onceCall(2, 2, 1020, 1111, 8, false))
	if vs := Analyze(h, onceParams).Check(); len(vs) != 0 {
		t.Fatalf("violations in a clean history: %+v", vs)
	}
	killed := cat(onceCall(0, 1, 0, 0, 0, false)[:1], computeEvents(0, 2, 10, 0, 7),
		[]Event{{T: ms(40), Proc: -1, Op: OpNemesis, Type: Invoke, Fault: FaultKill, Target: 0}, {T: ms(41), Proc: -1, Op: OpNemesis, Type: OK, Fault: FaultKill, Target: 0}},
		onceCall(1, 1, 5, 200, 8, true), computeEvents(1, 2, 60, 190, 8))
	if v := Analyze(killed, onceParams).Once(); v != nil {
		t.Fatalf("a computation taken over from a killed computer failed: %s", v.Format(killed))
	}
}

// TestOnceCatches: Once fails a value no computation produced, two
// computations at once, a second one within the window of a stored value, and
// a value handed out after its window.
func TestOnceCatches(t *testing.T) {
	for name, h := range map[string][]Event{
		"invented": cat(onceWindow(), []Event{{T: ms(20), Proc: 3, Op: OpOnce, Type: Invoke, ID: 1, Key: "k"},
			{T: ms(21), Proc: 3, Op: OpOnce, Type: OK, ID: 1, Key: "k", Err: `not a computed value: ""`}}),
		"at once":      cat(onceWindow(), onceCall(3, 1, 20, 120, 9, true), computeEvents(3, 2, 30, 110, 9)),
		"in window":    cat(onceWindow(), onceCall(3, 1, 300, 420, 9, true), computeEvents(3, 2, 310, 410, 9)),
		"after window": cat(onceWindow(), onceCall(3, 1, 1000, 1001, 7, false)),
	} {
		t.Run(name, func(t *testing.T) {
			if v := Analyze(h, onceParams).Once(); v == nil {
				t.Fatal("not caught")
			} else {
				t.Log(v.Format(h))
			}
		})
	}
}
