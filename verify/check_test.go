package verify

import (
	"sort"
	"strings"
	"testing"
	"time"
)

// ms is a history time of n milliseconds.
func ms(n int64) int64 { return n * int64(time.Millisecond) }

// lined numbers the events as ReadHistory does.
func lined(h []Event) []Event {
	for i := range h {
		h[i].Line = i
	}
	return h
}

var checkParams = Params{Kind: "plain", TTL: 400 * time.Millisecond, Bound: time.Second, Unsafe: unsafeFaults}

// grantEvents is worker p's grant of token tok: invoked at t, granted 1 ms
// later with its deadline at t+dl ms.
func grantEvents(p int, id int64, t int64, tok uint64, dl int64) []Event {
	return []Event{
		{T: ms(t), Proc: p, Op: OpAcquire, Type: Invoke, ID: id, Key: "k", Mode: "try"},
		{T: ms(t + 1), Proc: p, Op: OpAcquire, Type: OK, ID: id, Key: "k", Mode: "try", Token: tok, Deadline: ms(t + dl)},
	}
}

func releaseEvents(p int, id int64, t int64) []Event {
	return []Event{
		{T: ms(t), Proc: p, Op: OpRelease, Type: Invoke, ID: id, Key: "k"},
		{T: ms(t + 1), Proc: p, Op: OpRelease, Type: OK, ID: id, Key: "k"},
	}
}

func cat(parts ...[]Event) []Event {
	var h []Event
	for _, p := range parts {
		h = append(h, p...)
	}
	sort.SliceStable(h, func(i, j int) bool { return h[i].T < h[j].T }) // as ReadHistory orders them
	return lined(h)
}

func TestCheckersPassACleanHistory(t *testing.T) {
	h := cat(grantEvents(0, 1, 0, 10, 400), releaseEvents(0, 2, 100), grantEvents(1, 1, 110, 11, 400), releaseEvents(1, 2, 200))
	if vs := Analyze(h, checkParams).Check(); len(vs) != 0 {
		t.Fatalf("violations in a clean history: %+v", vs)
	}
}

func TestFencingFindsARepeatedToken(t *testing.T) {
	h := cat(grantEvents(0, 1, 0, 10, 400), releaseEvents(0, 2, 100), grantEvents(1, 1, 110, 10, 400), releaseEvents(1, 2, 200))
	if v := Analyze(h, checkParams).Fencing(); v == nil {
		t.Fatal("the repeated token went unseen")
	}
}

// TestFencingReportsTheFirstViolation: of the keys' violations, the one that
// came first, whatever order the keys are visited in (a broken variant's time
// to catch is that violation's).
func TestFencingReportsTheFirstViolation(t *testing.T) {
	var parts [][]Event
	for i, k := range []string{"a", "b", "c", "d", "e"} {
		at := int64(1000 - 100*i) // the last key's repeat comes first
		for _, e := range cat(grantEvents(0, int64(2*i+1), at, 10, 400), releaseEvents(0, int64(2*i+2), at+20), grantEvents(1, int64(i+1), at+30, 10, 400)) {
			e.Key = k
			parts = append(parts, []Event{e})
		}
	}
	h := cat(parts...)
	for range 20 { // map order differs from run to run
		v := Analyze(h, checkParams).Fencing()
		if v == nil || !strings.Contains(v.Msg, "key e:") {
			t.Fatalf("reported %+v, want key e's repeat, the first", v)
		}
	}
}

func TestExclusionFindsOverlapsButAcrossUnsafeFaults(t *testing.T) {
	h := cat(grantEvents(0, 1, 0, 10, 400), grantEvents(1, 1, 100, 11, 400), releaseEvents(0, 2, 200), releaseEvents(1, 2, 300))
	a := Analyze(h, checkParams)
	if a.Exclusion() == nil {
		t.Error("two holders at once went unseen")
	}
	if a.ToldFirst() == nil {
		t.Error("a holder not told went unseen")
	}
	crash := []Event{{T: ms(50), Proc: -1, Op: OpNemesis, Type: Invoke, Fault: FaultCrash, Target: -1}, {T: ms(60), Proc: -1, Op: OpNemesis, Type: OK, Fault: FaultCrash, Target: -1}}
	h = cat(grantEvents(0, 1, 0, 10, 400), crash, grantEvents(1, 1, 100, 11, 400), releaseEvents(0, 2, 200), releaseEvents(1, 2, 300))
	if v := Analyze(h, checkParams).Exclusion(); v != nil {
		t.Errorf("an overlap across a crash was not excused: %s", v.Msg)
	}
}

func TestFencingExcusesATokenRepeatedAcrossAnUnsafeFaultWhereTokensGoBack(t *testing.T) {
	loss := []Event{{T: ms(50), Proc: -1, Op: OpNemesis, Type: Invoke, Fault: FaultPowerLoss, Target: -1}, {T: ms(60), Proc: -1, Op: OpNemesis, Type: OK, Fault: FaultPowerLoss, Target: -1}}
	before := cat(grantEvents(0, 1, 0, 10, 400), releaseEvents(0, 2, 20))
	after := cat(grantEvents(1, 1, 100, 10, 400), releaseEvents(1, 2, 120), grantEvents(2, 1, 200, 11, 400), releaseEvents(2, 2, 220))
	p := checkParams
	p.TokensBack = true
	a := Analyze(cat(before, loss, after), p)
	if v := a.Fencing(); v != nil {
		t.Errorf("tokens gone back across a power loss: %s", v.Msg)
	}
	if a.Stats.Repeated != 1 {
		t.Errorf("repeated tokens counted %d, want 1", a.Stats.Repeated)
	}
	if Analyze(cat(before, loss, after), checkParams).Fencing() == nil {
		t.Error("a token repeated on a store whose tokens do not go back went unseen")
	}
	if Analyze(cat(before, after), p).Fencing() == nil {
		t.Error("a token repeated with no fault between went unseen")
	}
}

func TestExclusionEndsAWindowAtTheDeadline(t *testing.T) {
	// The first holder's deadline passed (Done fired) before the second grant.
	done := []Event{{T: ms(95), Proc: 0, Op: OpDone, Key: "k", Token: 10}}
	h := cat(grantEvents(0, 1, 0, 10, 90), done, grantEvents(1, 1, 100, 11, 400), releaseEvents(0, 2, 200), releaseEvents(1, 2, 300))
	a := Analyze(h, checkParams)
	if v := a.Exclusion(); v != nil {
		t.Errorf("exclusion: %s", v.Msg)
	}
	if v := a.ToldFirst(); v != nil {
		t.Errorf("told-first: %s", v.Msg)
	}
}

func TestResourceFindsAStaleWriteAccepted(t *testing.T) {
	w := func(p int, id int64, t int64, tok uint64, typ string) []Event {
		return []Event{{T: ms(t), Proc: p, Op: OpWrite, Type: Invoke, ID: id, Key: "k", Token: tok, Value: 1},
			{T: ms(t + 1), Proc: p, Op: OpWrite, Type: typ, ID: id, Key: "k", Token: tok, Value: 1}}
	}
	h := cat(w(0, 1, 0, 11, OK), w(1, 1, 10, 10, OK))
	a := Analyze(h, checkParams)
	if a.Resource() == nil {
		t.Error("a write below an accepted token went unseen")
	}
	if a.Linearizable("", time.Second) == nil {
		t.Error("porcupine found the stale write linearizable")
	}
	h = cat(w(0, 1, 0, 11, OK), w(1, 1, 10, 10, Fail))
	a = Analyze(h, checkParams)
	if v := a.Resource(); v != nil {
		t.Error(v.Msg)
	}
	if v := a.Linearizable("", time.Second); v != nil {
		t.Error(v.Msg)
	}
}

// readGrantEvents is worker p's grant of the read side, as grantEvents.
func readGrantEvents(p int, id int64, t int64, tok uint64, dl int64) []Event {
	h := grantEvents(p, id, t, tok, dl)
	for i := range h {
		h[i].Read = true
	}
	return h
}

func TestCheckReadersShareButNotAWriter(t *testing.T) {
	rw := checkParams
	rw.Kind = "rw"
	h := cat(readGrantEvents(0, 1, 0, 10, 400), readGrantEvents(1, 1, 50, 11, 400), releaseEvents(0, 2, 200), releaseEvents(1, 2, 210))
	a := Analyze(h, rw)
	if vs := a.Check(); len(vs) != 0 {
		t.Errorf("two readers at once: %+v", vs)
	}
	for name, h := range map[string][]Event{
		"a writer while a reader holds": cat(readGrantEvents(0, 1, 0, 10, 400), grantEvents(1, 1, 50, 11, 400), releaseEvents(0, 2, 200), releaseEvents(1, 2, 210)),
		"a reader while a writer holds": cat(grantEvents(0, 1, 0, 10, 400), readGrantEvents(1, 1, 50, 11, 400), releaseEvents(0, 2, 200), releaseEvents(1, 2, 210)),
	} {
		a := Analyze(h, rw)
		if a.Exclusion() == nil {
			t.Errorf("%s went unseen", name)
		}
		if a.ToldFirst() == nil {
			t.Errorf("%s: the holder not told went unseen", name)
		}
	}
}

// rw is worker p's read (value v) or write (value v, token tok) invoked at t ms
// and completed with typ 1 ms later.
func rwEvents(p int, id int64, t int64, op string, tok uint64, v int64, typ string) []Event {
	return []Event{{T: ms(t), Proc: p, Op: op, Type: Invoke, ID: id, Key: "k", Token: tok, Value: v},
		{T: ms(t + 1), Proc: p, Op: op, Type: typ, ID: id, Key: "k", Token: tok, Value: v}}
}

func TestCheckLostWriteNamesTheWriteAReadMissed(t *testing.T) {
	ok := cat(rwEvents(0, 1, 0, OpWrite, 10, 1, OK), rwEvents(1, 1, 10, OpWrite, 11, 2, OK), rwEvents(-1, 1, 20, OpRead, 0, 2, OK))
	a := Analyze(ok, checkParams)
	if v := a.LostWrite(); v != nil {
		t.Errorf("lost-write in a clean history: %s", v.Msg)
	}
	if v := a.Linearizable("", time.Second); v != nil {
		t.Errorf("linearizable: %s", v.Msg)
	}
	lost := cat(rwEvents(0, 1, 0, OpWrite, 10, 1, OK), rwEvents(1, 1, 10, OpWrite, 11, 2, OK), rwEvents(-1, 1, 20, OpRead, 0, 1, OK))
	a = Analyze(lost, checkParams)
	v := a.LostWrite()
	if v == nil {
		t.Fatal("the lost write went unseen")
	}
	if want := "the write of 2 with token 11 by worker 1"; !strings.Contains(v.Msg, want) || !strings.Contains(v.Msg, "the final read") {
		t.Errorf("the message does not name the lost write (%q): %s", want, v.Msg)
	}
	if a.Linearizable("", time.Second) == nil {
		t.Error("porcupine found the lost write linearizable")
	}
	// A write of unknown outcome with a higher token may have been applied
	// after the acknowledged one, and a refused write never is.
	unknown := cat(rwEvents(0, 1, 0, OpWrite, 10, 1, OK), rwEvents(1, 1, 5, OpWrite, 11, 2, Info), rwEvents(2, 1, 6, OpWrite, 9, 3, Fail), rwEvents(-1, 1, 20, OpRead, 0, 2, OK))
	if v := Analyze(unknown, checkParams).LostWrite(); v != nil {
		t.Errorf("lost-write across a write of unknown outcome: %s", v.Msg)
	}
	refused := cat(rwEvents(0, 1, 0, OpWrite, 10, 1, OK), rwEvents(2, 1, 6, OpWrite, 9, 3, Fail), rwEvents(-1, 1, 20, OpRead, 0, 3, OK))
	if v := Analyze(refused, checkParams).LostWrite(); v == nil {
		t.Error("a read of a refused write's value went unseen")
	}
}

// waitEvents is worker p's waiting acquisition from t to end ms, completed
// with typ (a grant of token tok when OK).
func waitEvents(p int, id int64, t, end int64, typ string, tok uint64) []Event {
	return []Event{
		{T: ms(t), Proc: p, Op: OpAcquire, Type: Invoke, ID: id, Key: "k", Mode: "wait"},
		{T: ms(end), Proc: p, Op: OpAcquire, Type: typ, ID: id, Key: "k", Mode: "wait", Token: tok, Deadline: ms(end + 400)},
	}
}

func TestCheckRecoveryAfterTheFaultsHealed(t *testing.T) {
	p := checkParams
	p.Recovery = time.Second
	kill := []Event{{T: ms(0), Proc: -1, Op: OpNemesis, Type: Invoke, Fault: FaultKill, Target: 3}, {T: ms(1), Proc: -1, Op: OpNemesis, Type: OK, Fault: FaultKill, Target: 3}}
	// Waiters wait without a break from 2 s to 6 s: nobody is served.
	starved := cat(kill, grantEvents(0, 1, 100, 10, 400),
		waitEvents(1, 1, 2000, 3500, Fail, 0), waitEvents(2, 1, 3000, 4500, Fail, 0), waitEvents(1, 2, 3600, 6000, Fail, 0))
	v := Analyze(starved, p).Recovery()
	if v == nil {
		t.Fatal("waiters unserved after the fault healed went unseen")
	}
	if !strings.Contains(v.Msg, "after the last fault healed") {
		t.Errorf("message: %s", v.Msg)
	}
	// Served every second: no violation; and unserved only before the
	// fault healed (plus TTL and Recovery): none either.
	served := cat(kill, waitEvents(1, 1, 2000, 2900, OK, 11), waitEvents(2, 1, 2100, 3800, OK, 12), waitEvents(1, 2, 3000, 4700, OK, 13))
	if v := Analyze(served, p).Recovery(); v != nil {
		t.Errorf("served waiters: %s", v.Msg)
	}
	early := cat(kill, waitEvents(1, 1, 10, 1500, Fail, 0), waitEvents(1, 2, 1500, 1700, OK, 11))
	if v := Analyze(early, p).Recovery(); v != nil {
		t.Errorf("a wait before the store recovered: %s", v.Msg)
	}
}

// pid sets the OS process of events.
func pid(p int, evs ...Event) []Event {
	for i := range evs {
		evs[i].PID = p
	}
	return evs
}

// TestKilledWriteSurvivesTheNextLife checks that a write whose worker was
// killed before its reply (the resource applied it) stays in the history as
// one of unknown outcome when the worker's next life, a new process, numbers
// its operations from 1 again and reuses the write's number: a later read of
// the written value is then linearizable.
func TestKilledWriteSurvivesTheNextLife(t *testing.T) {
	h := cat(
		pid(100, Event{T: ms(0), Proc: 0, Op: OpStart}),
		pid(100, grantEvents(0, 1, 1, 10, 400)...),
		pid(100, Event{T: ms(10), Proc: 0, Op: OpWrite, Type: Invoke, ID: 2, Key: "k", Token: 10, Value: 7}),
		[]Event{{T: ms(20), Proc: -1, Op: OpNemesis, Type: Invoke, Fault: FaultKill, Target: 0}, {T: ms(21), Proc: -1, Op: OpNemesis, Type: OK, Fault: FaultKill, Target: 0}},
		// The next life's operation 2 is a read of another key.
		pid(101, Event{T: ms(30), Proc: 0, Op: OpStart},
			Event{T: ms(40), Proc: 0, Op: OpRead, Type: Invoke, ID: 2, Key: "other"},
			Event{T: ms(41), Proc: 0, Op: OpRead, Type: OK, ID: 2, Key: "other"}),
		pid(102, grantEvents(1, 1, 500, 11, 400)...),
		pid(102, Event{T: ms(510), Proc: 1, Op: OpRead, Type: Invoke, ID: 2, Key: "k"},
			Event{T: ms(511), Proc: 1, Op: OpRead, Type: OK, ID: 2, Key: "k", Value: 7}),
	)
	if v := Analyze(h, checkParams).Linearizable("", 10*time.Second); v != nil {
		t.Errorf("a killed worker's applied write, read later: %s", v.Msg)
	}
}

// TestToldFirstIsNotExcusedByTheNetwork checks that a holder cut off from the
// store must still be told before the next grant (a black hole, a delay, an
// etcd partition, a session expiry excuse nothing), while a stop of the
// holder does excuse a late Done.
func TestToldFirstIsNotExcusedByTheNetwork(t *testing.T) {
	late := func(fault string, target int) []Event {
		return cat(
			grantEvents(0, 1, 0, 10, 400),
			[]Event{{T: ms(50), Proc: -1, Op: OpNemesis, Type: Invoke, Fault: fault, Target: target}},
			grantEvents(1, 1, 500, 11, 400),
			[]Event{{T: ms(600), Proc: -1, Op: OpNemesis, Type: OK, Fault: fault, Target: target}},
			[]Event{{T: ms(700), Proc: 0, Op: OpDone, Key: "k", Token: 10}},
		)
	}
	for _, f := range []string{FaultBlackhole, FaultDropRequests, FaultDropReplies, FaultDelay, FaultPartition, FaultExpire, FaultReset} {
		if v := Analyze(late(f, -1), checkParams).ToldFirst(); v == nil {
			t.Errorf("a holder told after the next grant across %s went unseen", f)
		}
	}
	if v := Analyze(late(FaultStop, 0), checkParams).ToldFirst(); v != nil {
		t.Errorf("a stopped holder told late: %s", v.Msg)
	}
}

// resizeEvents is the test process's resize of the semaphore k to n at t.
func resizeEvents(id, t int64, n int64) []Event {
	return []Event{
		{T: ms(t), Proc: -1, Op: OpResize, Type: Invoke, ID: id, Key: "k", Value: n},
		{T: ms(t + 1), Proc: -1, Op: OpResize, Type: OK, ID: id, Key: "k", Value: n},
	}
}

// TestExclusionOfAResizedSemaphore: holders above a lowered size may go on,
// but no permit is granted while they are as many as the size in force, and
// a raised size admits more.
func TestExclusionOfAResizedSemaphore(t *testing.T) {
	p := checkParams
	p.Kind, p.N = "sem", 2
	two := [][]Event{grantEvents(0, 1, 0, 10, 400), grantEvents(1, 1, 10, 11, 400)}
	lowered := append(two, resizeEvents(1, 20, 1), releaseEvents(0, 2, 100))
	h := cat(append(lowered, releaseEvents(1, 2, 150), grantEvents(2, 1, 200, 12, 400), releaseEvents(2, 2, 250))...)
	if v := Analyze(h, p).Exclusion(); v != nil {
		t.Errorf("holders above a lowered size going on: %s", v.Msg)
	}
	h = cat(append(lowered, grantEvents(2, 1, 120, 12, 400), releaseEvents(1, 2, 150), releaseEvents(2, 2, 250))...)
	if v := Analyze(h, p).Exclusion(); v == nil || !strings.Contains(v.Msg, "at most 1") {
		t.Errorf("a grant over the lowered size: %+v", v)
	}
	h = cat(append(two, resizeEvents(1, 20, 3), grantEvents(2, 1, 30, 12, 400),
		releaseEvents(0, 2, 100), releaseEvents(1, 2, 150), releaseEvents(2, 2, 250))...)
	if v := Analyze(h, p).Exclusion(); v != nil {
		t.Errorf("a third holder under a raised size: %s", v.Msg)
	}
	// A resize whose outcome is unknown may have landed: its size is allowed.
	h = cat(append(two, []Event{{T: ms(20), Proc: -1, Op: OpResize, Type: Invoke, ID: 1, Key: "k", Value: 3}}, grantEvents(2, 1, 30, 12, 400),
		releaseEvents(0, 2, 100), releaseEvents(1, 2, 150), releaseEvents(2, 2, 250))...)
	if v := Analyze(h, p).Exclusion(); v != nil {
		t.Errorf("a third holder after a resize to 3 of unknown outcome: %s", v.Msg)
	}
}

// TestLockDelayFindsAGrantWithinTheDelay: a grant before an unclean holder's
// last deadline plus the delay is a violation; after a clean release it is not.
func TestLockDelayFindsAGrantWithinTheDelay(t *testing.T) {
	p := checkParams
	p.Delay = 500 * time.Millisecond
	done := []Event{{T: ms(95), Proc: 0, Op: OpDone, Key: "k", Token: 10}}
	refused := []Event{
		{T: ms(96), Proc: 0, Op: OpRelease, Type: Invoke, ID: 2, Key: "k"},
		{T: ms(97), Proc: 0, Op: OpRelease, Type: Fail, ID: 2, Key: "k"},
	}
	// The holder's lease ran out at 90 ms (its release was refused): the
	// next grant is due at 590 ms at the earliest.
	for _, tc := range []struct {
		name  string
		h     []Event
		fails bool
	}{
		{"within the delay", cat(grantEvents(0, 1, 0, 10, 90), done, refused, grantEvents(1, 1, 300, 11, 400), releaseEvents(1, 2, 400)), true},
		{"after the delay", cat(grantEvents(0, 1, 0, 10, 90), done, refused, grantEvents(1, 1, 600, 11, 400), releaseEvents(1, 2, 700)), false},
		{"after a clean release", cat(grantEvents(0, 1, 0, 10, 400), releaseEvents(0, 2, 50), grantEvents(1, 1, 60, 11, 400), releaseEvents(1, 2, 100)), false},
		{"a release of unknown outcome", cat(grantEvents(0, 1, 0, 10, 400), []Event{{T: ms(50), Proc: 0, Op: OpRelease, Type: Invoke, ID: 2, Key: "k"}},
			grantEvents(1, 1, 60, 11, 400), releaseEvents(1, 2, 100)), false},
	} {
		if v := Analyze(tc.h, p).LockDelay(); (v != nil) != tc.fails {
			t.Errorf("%s: violation %v, want one: %v", tc.name, v, tc.fails)
		}
	}
	// Without a delay, nothing is checked.
	h := cat(grantEvents(0, 1, 0, 10, 90), done, refused, grantEvents(1, 1, 300, 11, 400), releaseEvents(1, 2, 400))
	if v := Analyze(h, checkParams).LockDelay(); v != nil {
		t.Errorf("a lock without a delay: %s", v.Msg)
	}
}

// forceEvents is the test process's force-unlock of k at t, which removed
// token tok (0: the Inspector named none).
func forceEvents(t int64, tok uint64) []Event {
	return []Event{
		{T: ms(t), Proc: -1, Op: OpNemesis, Type: Invoke, Fault: FaultForce, Target: -1, Key: "k"},
		{T: ms(t + 2), Proc: -1, Op: OpNemesis, Type: OK, Fault: FaultForce, Target: -1, Key: "k", Token: tok},
	}
}

// forceOf is a force-unlock that names the holding it removed by token and
// owner.
func forceOf(t int64, tok uint64, owner string) []Event {
	h := forceEvents(t, tok)
	h[1].Owner = owner
	return h
}

// forceCheckers returns the checkers of a force's outcome that fail on a.
func forceCheckers(a *Analysis) []string {
	var got []string
	for _, v := range []*Violation{a.ToldAtOnce(), a.Exclusion(), a.ToldFirst(), a.SpuriousLoss()} {
		if v != nil {
			got = append(got, v.Checker)
		}
	}
	return got
}

// failedForce is a force-unlock that found nothing held (ErrNotHeld).
func failedForce(t int64) []Event {
	h := forceEvents(t, 0)
	h[1].Type = Fail
	return h
}

// owned gives the grants of h the owner o.
func owned(h []Event, o string) []Event {
	for i := range h {
		if h[i].Op == OpAcquire && h[i].Type == OK {
			h[i].Owner = o
		}
	}
	return h
}

// TestToldAtOnceAfterAForce: a force-unlocked holder's Done must fire within
// the bound (67 ms for a 400 ms TTL) of the force; its overlap with the next
// holder until then is excused, and only its own; a stopped holder is
// excused, and a holding younger than the bound only on a store whose holders
// may miss a force that came before their watch was up (LateWatch).
func TestToldAtOnceAfterAForce(t *testing.T) {
	told := func(at int64) []Event {
		return []Event{{T: ms(at), Proc: 0, Op: OpDone, Key: "k", Token: 10},
			{T: ms(at + 1), Proc: 0, Op: OpRelease, Type: Invoke, ID: 2, Key: "k"}, {T: ms(at + 2), Proc: 0, Op: OpRelease, Type: Fail, ID: 2, Key: "k"}}
	}
	stop := []Event{{T: ms(90), Proc: -1, Op: OpNemesis, Type: Invoke, Fault: FaultStop, Target: 0}, {T: ms(300), Proc: -1, Op: OpNemesis, Type: OK, Fault: FaultStop, Target: 0}}
	next := grantEvents(1, 1, 104, 11, 400) // a waiter takes the freed lock
	for _, tc := range []struct {
		name string
		h    []Event
		want []string // the checkers that must fail (of told-at-once, exclusion, told-first, spurious-loss)
		late bool     // Params.LateWatch
	}{
		{"told at once", cat(grantEvents(0, 1, 0, 10, 400), forceEvents(100, 10), next, told(112), releaseEvents(1, 2, 300)), nil, false},
		{"told at the renewal", cat(grantEvents(0, 1, 0, 10, 400), forceEvents(100, 10), next, told(230), releaseEvents(1, 2, 300)), []string{"told-at-once"}, false},
		{"never told", cat(grantEvents(0, 1, 0, 10, 400), forceEvents(100, 10), next, releaseEvents(1, 2, 300)), []string{"told-at-once"}, false},
		{"no token named, told late", cat(grantEvents(0, 1, 0, 10, 400), forceEvents(100, 0), next, told(230), releaseEvents(1, 2, 300)), []string{"told-at-once"}, false},
		{"a stopped holder", cat(grantEvents(0, 1, 0, 10, 400), stop[:1], forceEvents(100, 10), next, stop[1:], told(310), releaseEvents(1, 2, 320)), nil, false},
		// Redis's Client checks its holdings when its loss subscription
		// is established, etcd's Driver when its watch begins, memlock
		// tells the holder itself: a force that came before the holder's
		// subscription was up is told at once too, so a young holding
		// told at the renewal is a violation.
		{"a holding younger than the bound", cat(grantEvents(0, 1, 50, 10, 400), forceEvents(100, 10), next, told(230), releaseEvents(1, 2, 300)), []string{"told-at-once"}, false},
		{"a holding younger than the bound, told at once", cat(grantEvents(0, 1, 90, 10, 400), forceEvents(100, 10), next, told(115), releaseEvents(1, 2, 300)), nil, false},
		// ZooKeeper, PostgreSQL: a force before the watch was up is
		// left to the renewal.
		{"a holding younger than the bound, watch starting", cat(grantEvents(0, 1, 50, 10, 400), forceEvents(100, 10), next, told(230), releaseEvents(1, 2, 300)), nil, true},
		{"an older holding, watch up", cat(grantEvents(0, 1, 0, 10, 400), forceEvents(100, 10), next, told(230), releaseEvents(1, 2, 300)), []string{"told-at-once"}, true},
		{"released before the force", cat(grantEvents(0, 1, 0, 10, 400), releaseEvents(0, 2, 99), forceEvents(100, 10), next, releaseEvents(1, 2, 300)), nil, false},
		// A force that removed another holding excuses nothing of this one.
		{"a force of another token", cat(grantEvents(0, 1, 0, 10, 400), forceEvents(100, 9), next, told(230), releaseEvents(1, 2, 300)), []string{"exclusion", "told-first", "spurious-loss"}, false},
		// Redlock: a node that lost the holding (a crash) and took it
		// anew at a renewal drew a token of its own, which the force may
		// name; the owner names the holding.
		{"a force of the owner, another token", cat(owned(grantEvents(0, 1, 0, 10, 400), "o1"), forceOf(100, 15, "o1"), next, told(112), releaseEvents(1, 2, 300)), nil, false},
		{"a force of the owner, another token, told late", cat(owned(grantEvents(0, 1, 0, 10, 400), "o1"), forceOf(100, 15, "o1"), next, told(230), releaseEvents(1, 2, 300)), []string{"told-at-once"}, false},
		{"a force of another owner and token", cat(owned(grantEvents(0, 1, 0, 10, 400), "o1"), forceOf(100, 15, "o2"), next, told(230), releaseEvents(1, 2, 300)), []string{"exclusion", "told-first", "spurious-loss"}, false},
		// The force removed an earlier attempt's holding of the owner; its
		// next attempt was granted after the force: nothing to tell.
		{"a later attempt of the owner", cat(forceOf(100, 9, "o1"), owned(grantEvents(0, 1, 105, 10, 400), "o1"), releaseEvents(0, 2, 300)), nil, false},
	} {
		p := checkParams
		p.LateWatch = tc.late
		got := forceCheckers(Analyze(tc.h, p))
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%s: violations %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestForceUnderWayDuringAnAcquisition: on a store whose force-unlock runs
// node by node (Redlock), an acquisition under way while it ran may lose its
// majority to it although the force names the holder before: that loss is
// no spurious one (ForceSpans), and its holder, whom the force may have
// missed, need not be told; elsewhere the loss is a violation.
func TestForceUnderWayDuringAnAcquisition(t *testing.T) {
	second := func(done int64) []Event {
		h := []Event{
			{T: ms(95), Proc: 1, Op: OpAcquire, Type: Invoke, ID: 1, Key: "k", Mode: "wait"},
			{T: ms(104), Proc: 1, Op: OpAcquire, Type: OK, ID: 1, Key: "k", Mode: "wait", Token: 11, Owner: "o2", Deadline: ms(495)},
		}
		if done != 0 {
			h = append(h, Event{T: ms(done), Proc: 1, Op: OpDone, Key: "k", Token: 11})
		}
		return h
	}
	first := cat(owned(grantEvents(0, 1, 0, 10, 400), "o1"), forceOf(100, 10, "o1"),
		[]Event{{T: ms(103), Proc: 0, Op: OpDone, Key: "k", Token: 10}})
	for _, tc := range []struct {
		name  string
		h     []Event
		spans bool
		want  []string
	}{
		{"lost to the force", cat(first, second(105)), true, nil},
		{"missed by the force", cat(first, second(0), releaseEvents(1, 2, 300)), true, nil},
		{"lost, on a store whose force is one step", cat(first, second(105)), false, []string{"spurious-loss"}},
		{"lost after the force", cat(first, second(0), []Event{{T: ms(200), Proc: 1, Op: OpDone, Key: "k", Token: 11}}), true, nil},
		// A force that found no majority holding still removes what each
		// node holds: the holder's loss is no spurious one.
		{"lost to a force that named nothing", cat(owned(grantEvents(0, 1, 0, 10, 400), "o1"), failedForce(100), []Event{{T: ms(101), Proc: 0, Op: OpDone, Key: "k", Token: 10}}), true, nil},
		{"lost while a force that named nothing ran, on a store whose force is one step", cat(owned(grantEvents(0, 1, 0, 10, 400), "o1"), failedForce(100), []Event{{T: ms(101), Proc: 0, Op: OpDone, Key: "k", Token: 10}}), false, []string{"spurious-loss"}},
	} {
		p := checkParams
		p.ForceSpans = tc.spans
		got := forceCheckers(Analyze(tc.h, p))
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%s: violations %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestToldAtOnceOfEveryHolderOfASharedLock: a force of a lock that several
// hold (a semaphore, a read-write lock's readers) removes every holder, so
// each must be told at once, whichever token the force named; their early
// losses are excused.
func TestToldAtOnceOfEveryHolderOfASharedLock(t *testing.T) {
	p := checkParams
	p.Kind, p.N = "sem", 2
	done := func(proc int, tok uint64, at int64) []Event {
		return []Event{{T: ms(at), Proc: proc, Op: OpDone, Key: "k", Token: tok}}
	}
	two := cat(grantEvents(0, 1, 0, 10, 400), grantEvents(1, 1, 10, 11, 400), forceEvents(100, 10))
	for _, tc := range []struct {
		name string
		h    []Event
		want []string
	}{
		{"both told at once", cat(two, done(0, 10, 110), done(1, 11, 112), grantEvents(2, 1, 120, 12, 400)), nil},
		{"the holder not named told at the renewal", cat(two, done(0, 10, 110), grantEvents(2, 1, 120, 12, 400), done(1, 11, 230)), []string{"told-at-once"}},
	} {
		a := Analyze(tc.h, p)
		var got []string
		for _, v := range []*Violation{a.ToldAtOnce(), a.Exclusion(), a.SpuriousLoss()} {
			if v != nil {
				got = append(got, v.Checker)
			}
		}
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%s: violations %v, want %v", tc.name, got, tc.want)
		}
	}
}
