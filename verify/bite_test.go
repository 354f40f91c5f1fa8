package verify

import (
	"testing"
	"time"
)

// bitten returns the violation of Bitten on h for a run aimed at aim.
func bitten(h []Event, aim ...string) *Violation {
	p := checkParams
	p.Aim = aim
	return Analyze(h, p).Bitten()
}

// TestAScenarioWhoseFaultNeverBitFails: a run whose aimed fault never had
// its effect fails the fault checker, among the others Check runs; the same
// run with a fault that bit passes.
func TestAScenarioWhoseFaultNeverBitFails(t *testing.T) {
	// A black hole during which every operation came back at once: it cut
	// nothing.
	quiet := cat(grantEvents(0, 1, 0, 10, 400), faultEvents(FaultBlackhole, -1, 50, 150),
		releaseEvents(0, 2, 100), grantEvents(1, 1, 200, 11, 400), releaseEvents(1, 2, 300))
	p := checkParams
	p.Aim = []string{FaultBlackhole}
	vs := Analyze(quiet, p).Check()
	if len(vs) != 1 || vs[0].Checker != "fault" {
		t.Fatalf("a black hole that cut nothing: violations %+v, want the fault checker's alone", vs)
	}
	t.Log(vs[0].Msg)
	if v := bitten(quiet); v != nil {
		t.Errorf("a run aimed at no fault: %s", v.Msg)
	}
	// The same with the release held until the heal: it bit.
	held := cat(grantEvents(0, 1, 0, 10, 400), faultEvents(FaultBlackhole, -1, 50, 150),
		[]Event{{T: ms(60), Proc: 0, Op: OpRelease, Type: Invoke, ID: 2, Key: "k"}, {T: ms(152), Proc: 0, Op: OpRelease, Type: OK, ID: 2, Key: "k"}},
		grantEvents(1, 1, 200, 11, 400), releaseEvents(1, 2, 300))
	if v := bitten(held, FaultBlackhole); v != nil {
		t.Errorf("a black hole that held a release until it healed: %s", v.Msg)
	}
	// A fault aimed at and never injected did not bite either.
	if v := bitten(held, FaultCrash); v == nil {
		t.Error("a run aimed at a crash it never injected passed")
	}
}

// TestWhatMakesEachFaultBite checks each fault's effect, measured from the
// history, with a history where it had it and one where it did not.
func TestWhatMakesEachFaultBite(t *testing.T) {
	type tc struct {
		name      string
		fault     string
		bit, none []Event
	}
	info := func(p int, id, t0, t1 int64) []Event {
		return []Event{{T: ms(t0), Proc: p, Op: OpAcquire, Type: Invoke, ID: id, Key: "k", Mode: "wait"},
			{T: ms(t1), Proc: p, Op: OpAcquire, Type: Info, ID: id, Key: "k", Mode: "wait", Err: "connection reset"}}
	}
	cases := []tc{
		{"a pause past the lease's deadline", FaultStop,
			cat(grantEvents(0, 1, 0, 10, 400), faultEvents(FaultStop, 0, 100, 600)),
			cat(grantEvents(0, 1, 0, 10, 400), faultEvents(FaultStop, 0, 100, 300), releaseEvents(0, 2, 350))},
		{"a pause of a worker that held nothing", FaultStop,
			nil,
			cat(grantEvents(0, 1, 0, 10, 400), releaseEvents(0, 2, 50), faultEvents(FaultStop, 0, 100, 900))},
		{"a kill of a holder", FaultKill,
			cat(grantEvents(0, 1, 0, 10, 400), faultEvents(FaultKill, 0, 100, 101)),
			cat(grantEvents(0, 1, 0, 10, 400), releaseEvents(0, 2, 50), faultEvents(FaultKill, 0, 100, 101))},
		// A crash that lost the holding: another worker got the key within
		// the first's deadline; one that lost nothing: the next grant came
		// after the first's release.
		{"a crash that lost a holding", FaultCrash,
			cat(grantEvents(0, 1, 0, 10, 400), faultEvents(FaultCrash, -1, 100, 150), grantEvents(1, 1, 200, 11, 400)),
			cat(grantEvents(0, 1, 0, 10, 400), faultEvents(FaultCrash, -1, 100, 150), releaseEvents(0, 2, 200), grantEvents(1, 1, 250, 11, 400))},
		{"a crash that told a holder it lost (Done before its deadline)", FaultCrash,
			cat(grantEvents(0, 1, 0, 10, 400), faultEvents(FaultCrash, -1, 100, 150), []Event{{T: ms(160), Proc: 0, Op: OpDone, Key: "k", Token: 10, Err: "lock lost: extend refused"}}),
			cat(grantEvents(0, 1, 0, 10, 400), faultEvents(FaultCrash, -1, 100, 150), []Event{{T: ms(401), Proc: 0, Op: OpDone, Key: "k", Token: 10, Err: "lock lost: no renewal succeeded before the local deadline"}})},
		// A renewal that succeeded after the crash shows it lost nothing of
		// the holding: a later loss is not its doing.
		{"a crash healed before the holder renewed", FaultCrash,
			nil,
			cat(grantEvents(0, 1, 0, 10, 400), faultEvents(FaultCrash, -1, 100, 150), renewEvents(0, 200, 10, 580), grantEvents(1, 1, 300, 11, 400))},
		// The store, asked right after the restart, no longer held a
		// holding granted before the crash, neither released nor past its
		// deadline; one that still held it lost nothing.
		{"a crash after which the store no longer held a holding", FaultCrash,
			cat(grantEvents(0, 1, 0, 10, 400), faultEvents(FaultCrash, -1, 100, 150), []Event{{T: ms(149), Proc: -1, Op: OpStored, Key: "k"}}),
			cat(grantEvents(0, 1, 0, 10, 400), faultEvents(FaultCrash, -1, 100, 150), []Event{{T: ms(149), Proc: -1, Op: OpStored, Key: "k", Token: 10}})},
		{"a crash after which the store no longer held a holding released before it", FaultCrash,
			nil,
			cat(grantEvents(0, 1, 0, 10, 400), releaseEvents(0, 2, 90), faultEvents(FaultCrash, -1, 100, 150), []Event{{T: ms(149), Proc: -1, Op: OpStored, Key: "k"}})},
		// A failover: the old primary granted during the fault (its
		// replica cut off); the promoted replica lacks the grant. One
		// whose release the old primary acknowledged lost nothing.
		{"a failover whose promoted replica lacks a grant", FaultFailover,
			cat(faultEvents(FaultFailover, -1, 100, 400), grantEvents(0, 1, 150, 10, 400), []Event{{T: ms(300), Proc: -1, Op: OpStored, Key: "k"}}),
			cat(faultEvents(FaultFailover, -1, 100, 400), grantEvents(0, 1, 150, 10, 400), releaseEvents(0, 2, 200), []Event{{T: ms(300), Proc: -1, Op: OpStored, Key: "k"}})},
		// A crash from a snapshot: a grant acknowledged after the
		// snapshot was lost, whatever its holder did next; one before
		// the snapshot was not.
		{"a crash after a grant the snapshot lacks", FaultPowerLoss,
			cat(faultEvents(FaultSnapshot, -1, 50, 50), grantEvents(0, 1, 60, 10, 400), releaseEvents(0, 2, 80), faultEvents(FaultPowerLoss, -1, 100, 150)),
			cat(grantEvents(0, 1, 0, 10, 400), releaseEvents(0, 2, 20), faultEvents(FaultSnapshot, -1, 50, 50), faultEvents(FaultPowerLoss, -1, 100, 150))},
		{"a power loss that lost a holding", FaultPowerLoss,
			cat(grantEvents(0, 1, 0, 10, 400), faultEvents(FaultPowerLoss, -1, 100, 150), grantEvents(1, 1, 200, 11, 400)),
			cat(grantEvents(0, 1, 0, 10, 400), faultEvents(FaultPowerLoss, -1, 100, 150), releaseEvents(0, 2, 200), grantEvents(1, 1, 250, 11, 400))},
		{"a force-unlock that removed a holding", FaultForce,
			cat(grantEvents(0, 1, 0, 10, 400), []Event{{T: ms(100), Proc: -1, Op: OpNemesis, Type: Invoke, Fault: FaultForce, Target: -1, Key: "k"}, {T: ms(101), Proc: -1, Op: OpNemesis, Type: OK, Fault: FaultForce, Target: -1, Key: "k", Token: 10}}),
			cat(grantEvents(0, 1, 0, 10, 400), []Event{{T: ms(100), Proc: -1, Op: OpNemesis, Type: Invoke, Fault: FaultForce, Target: -1, Key: "k"}, {T: ms(101), Proc: -1, Op: OpNemesis, Type: Fail, Fault: FaultForce, Target: -1, Key: "k"}})},
		{"a black hole that left an acquisition's outcome unknown", FaultBlackhole,
			cat(faultEvents(FaultBlackhole, -1, 100, 400), info(0, 1, 50, 300)),
			// Unknown long after the heal, another fault of the store
			// between: that one may have caused it.
			cat(faultEvents(FaultBlackhole, -1, 100, 400), faultEvents(FaultReset, -1, 850, 851), info(0, 1, 50, 900))},
		{"a one-way partition whose lease ran out", FaultDropReplies,
			cat(grantEvents(0, 1, 0, 10, 400), faultEvents(FaultDropReplies, -1, 100, 500), []Event{{T: ms(401), Proc: 0, Op: OpDone, Key: "k", Token: 10, Err: "lock lost: no renewal succeeded before the local deadline"}}),
			cat(grantEvents(0, 1, 0, 10, 400), faultEvents(FaultDropReplies, -1, 100, 500), releaseEvents(0, 2, 50))},
		// A delay bit when a single round trip sent during it took the
		// delay at least.
		{"a delay that slowed a release", FaultDelay,
			cat(grantEvents(0, 1, 0, 10, 400), []Event{{T: ms(50), Proc: -1, Op: OpNemesis, Type: Invoke, Fault: FaultDelay, Target: -1, Delay: 20 * time.Millisecond, ReplyDelay: 20 * time.Millisecond},
				{T: ms(100), Proc: 0, Op: OpRelease, Type: Invoke, ID: 2, Key: "k"}, {T: ms(141), Proc: 0, Op: OpRelease, Type: OK, ID: 2, Key: "k"},
				{T: ms(300), Proc: -1, Op: OpNemesis, Type: OK, Fault: FaultDelay, Target: -1}}),
			cat(grantEvents(0, 1, 0, 10, 400), []Event{{T: ms(50), Proc: -1, Op: OpNemesis, Type: Invoke, Fault: FaultDelay, Target: -1, Delay: 20 * time.Millisecond, ReplyDelay: 20 * time.Millisecond},
				{T: ms(100), Proc: 0, Op: OpRelease, Type: Invoke, ID: 2, Key: "k"}, {T: ms(110), Proc: 0, Op: OpRelease, Type: OK, ID: 2, Key: "k"},
				{T: ms(300), Proc: -1, Op: OpNemesis, Type: OK, Fault: FaultDelay, Target: -1}})},
		{"a reset that cut connections", FaultReset,
			cat([]Event{{T: ms(100), Proc: -1, Op: OpNemesis, Type: Invoke, Fault: FaultReset, Target: -1}, {T: ms(101), Proc: -1, Op: OpNemesis, Type: OK, Fault: FaultReset, Target: -1, Cut: 3}}),
			cat([]Event{{T: ms(100), Proc: -1, Op: OpNemesis, Type: Invoke, Fault: FaultReset, Target: -1}, {T: ms(101), Proc: -1, Op: OpNemesis, Type: OK, Fault: FaultReset, Target: -1}})},
	}
	for _, c := range cases {
		if c.bit != nil {
			if v := bitten(c.bit, c.fault); v != nil {
				t.Errorf("%s: not seen: %s", c.name, v.Msg)
			}
		}
		if v := bitten(c.none, c.fault); v == nil {
			t.Errorf("%s: the history without the effect passed", c.name)
		}
	}
}
