package verify

import "testing"

// TestWhatMakesEachFaultBiteInTheOnceWorkload checks each fault's effect on
// the Once workload, whose history records computations and calls of Do
// rather than grants, with a history where it had it and one where it did
// not (a TTL of 400 ms).
func TestWhatMakesEachFaultBiteInTheOnceWorkload(t *testing.T) {
	call := func(p int, id, t0, t1 int64, typ string) []Event {
		return []Event{{T: ms(t0), Proc: p, Op: OpOnce, Type: Invoke, ID: id, Key: "k"},
			{T: ms(t1), Proc: p, Op: OpOnce, Type: typ, ID: id, Key: "k", Value: 7}}
	}
	// compute is worker p's computation from t0 to t1 ms (t1 0: it never
	// ended) that ended as typ.
	compute := func(p int, id, t0, t1 int64, typ string) []Event {
		h := []Event{{T: ms(t0), Proc: p, Op: OpCompute, Type: Invoke, ID: id, Key: "k", Value: 7}}
		if t1 > 0 {
			h = append(h, Event{T: ms(t1), Proc: p, Op: OpCompute, Type: typ, ID: id, Key: "k", Value: 7})
		}
		return h
	}
	force := func(t0, t1 int64) []Event {
		return []Event{{T: ms(t0), Proc: -1, Op: OpNemesis, Type: Invoke, Fault: FaultForce, Target: -1, Key: "k"},
			{T: ms(t1), Proc: -1, Op: OpNemesis, Type: OK, Fault: FaultForce, Target: -1, Key: "k", Token: 3}}
	}
	cases := []struct {
		name      string
		fault     string
		bit, none []Event
	}{
		{"a computer paused longer than the TTL", FaultStop,
			cat(call(0, 1, 0, 900, OK), compute(0, 2, 10, 890, Info), faultEvents(FaultStop, 0, 100, 600)),
			cat(call(0, 1, 0, 500, OK), compute(0, 2, 10, 490, OK), faultEvents(FaultStop, 0, 100, 300))},
		{"a computer killed", FaultKill,
			cat(call(0, 1, 0, 0, OK)[:1], compute(0, 2, 10, 0, ""), faultEvents(FaultKill, 0, 100, 101)),
			cat(call(0, 1, 0, 50, OK), compute(0, 2, 10, 40, OK), faultEvents(FaultKill, 0, 100, 101))},
		{"a force of a key being computed", FaultForce,
			cat(call(0, 1, 0, 300, OK), compute(0, 2, 10, 290, Info), force(100, 101)),
			cat(call(0, 1, 0, 50, OK), compute(0, 2, 10, 40, OK), force(100, 101))},
		{"a black hole that failed a Do", FaultBlackhole,
			cat(call(0, 1, 50, 300, Fail), faultEvents(FaultBlackhole, -1, 100, 200)),
			cat(call(0, 1, 50, 300, OK), faultEvents(FaultBlackhole, -1, 100, 200))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if n := Analyze(c.bit, checkParams).Stats.Bit[c.fault]; n != 1 {
				t.Errorf("with its effect: %s bit %d times, want 1", c.fault, n)
			}
			if n := Analyze(c.none, checkParams).Stats.Bit[c.fault]; n != 0 {
				t.Errorf("without its effect: %s bit %d times, want 0", c.fault, n)
			}
		})
	}
}
