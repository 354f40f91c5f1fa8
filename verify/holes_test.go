package verify

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testserver"
)

// fault is the nemesis's fault f of target from t0 to t1 ms.
func faultEvents(f string, target int, t0, t1 int64) []Event {
	return []Event{{T: ms(t0), Proc: -1, Op: OpNemesis, Type: Invoke, Fault: f, Target: target},
		{T: ms(t1), Proc: -1, Op: OpNemesis, Type: OK, Fault: f, Target: target}}
}

// renewEvents is worker p's renewal of token tok seen at t ms, its deadline
// moved to dl ms.
func renewEvents(p int, t int64, tok uint64, dl int64) []Event {
	return []Event{{T: ms(t), Proc: p, Op: OpExtend, Key: "k", Token: tok, Deadline: ms(dl)}}
}

func doneEvents(p int, t int64, tok uint64) []Event {
	return []Event{{T: ms(t), Proc: p, Op: OpDone, Key: "k", Token: tok}}
}

// checkerNames runs every checker but the linearizability one and returns
// the names of those that failed.
func checkerNames(a *Analysis) []string {
	var got []string
	for _, v := range []*Violation{a.Fencing(), a.Resource(), a.LostWrite(), a.Exclusion(), a.SpuriousLoss(), a.ToldFirst(), a.ToldAtOnce(), a.LockDelay(), a.Handover(), a.Recovery(), a.Fairness(), a.Starvation()} {
		if v != nil {
			got = append(got, v.Checker)
		}
	}
	return got
}

// TestFencingComparesAWaiterWithTheGrantItQueuedBehind: a waiter invoked
// before a grant completed, granted after it while its holding was valid,
// has the larger token: the store granted the other first.
func TestFencingComparesAWaiterWithTheGrantItQueuedBehind(t *testing.T) {
	h := func(tok uint64, extra ...[]Event) []Event {
		return cat(append([][]Event{waitEvents(1, 1, 50, 160, OK, tok), grantEvents(0, 1, 100, 20, 400), releaseEvents(0, 2, 150), releaseEvents(1, 2, 300)}, extra...)...)
	}
	if v := Analyze(h(19), checkParams).Fencing(); v == nil {
		t.Error("a token that went down on a hand-over to a waiter went unseen")
	}
	if v := Analyze(h(21), checkParams).Fencing(); v != nil {
		t.Errorf("a hand-over with a larger token: %s", v.Msg)
	}
	// A crash inside the waiter's acquisition may have lost its holding:
	// the store may have granted it first.
	if v := Analyze(h(19, faultEvents(FaultCrash, -1, 120, 130)), checkParams).Fencing(); v != nil {
		t.Errorf("across a crash inside the waiter's acquisition: %s", v.Msg)
	}
	// Two readers may be granted in either order.
	rw := checkParams
	rw.Kind = "rw"
	readers := cat(readGrantEvents(0, 1, 100, 20, 400), []Event{
		{T: ms(50), Proc: 1, Op: OpAcquire, Type: Invoke, ID: 1, Key: "k", Mode: "wait", Read: true},
		{T: ms(160), Proc: 1, Op: OpAcquire, Type: OK, ID: 1, Key: "k", Mode: "wait", Read: true, Token: 19, Deadline: ms(560)}})
	if v := Analyze(readers, rw).Fencing(); v != nil {
		t.Errorf("two readers: %s", v.Msg)
	}
}

// TestFencingFindsATokenGrantedTwice: two grants of a key never share a
// token, however their acquisitions overlapped and whatever fault came.
func TestFencingFindsATokenGrantedTwice(t *testing.T) {
	for _, crash := range [][]Event{nil, faultEvents(FaultCrash, -1, 120, 130)} {
		h := cat(waitEvents(0, 1, 0, 100, OK, 10), waitEvents(1, 1, 50, 300, OK, 10), releaseEvents(0, 2, 200), crash, releaseEvents(1, 2, 400))
		if v := Analyze(h, checkParams).Fencing(); v == nil {
			t.Errorf("a token granted twice went unseen (crash: %v)", crash != nil)
		}
	}
	h := cat(waitEvents(0, 1, 0, 100, OK, 10), waitEvents(1, 1, 50, 300, OK, 11), releaseEvents(0, 2, 200), releaseEvents(1, 2, 400))
	if v := Analyze(h, checkParams).Fencing(); v != nil {
		t.Errorf("distinct tokens: %s", v.Msg)
	}
}

// TestExclusionIsNotExcusedByAFaultTheHolderRenewedAfter: an unsafe fault
// excuses an overlap only when it came after the first holder's last
// successful round trip: one that healed before a renewal that succeeded lost
// nothing of its holding.
func TestExclusionIsNotExcusedByAFaultTheHolderRenewedAfter(t *testing.T) {
	h := func(crash []Event) []Event {
		return cat(grantEvents(0, 1, 0, 10, 400), crash, renewEvents(0, 150, 10, 540), renewEvents(0, 290, 10, 680),
			grantEvents(1, 1, 300, 11, 400), releaseEvents(0, 2, 500), releaseEvents(1, 2, 600))
	}
	if v := Analyze(h(faultEvents(FaultCrash, -1, 50, 60)), checkParams).Exclusion(); v == nil {
		t.Error("an overlap across a crash the holder renewed after went unseen")
	}
	if v := Analyze(h(faultEvents(FaultCrash, -1, 285, 295)), checkParams).Exclusion(); v != nil {
		t.Errorf("an overlap across a crash after the holder's last renewal: %s", v.Msg)
	}
}

// TestForceExcusesUntilARenewalSucceeds: a force-unlocked holder whose
// renewal that began after the force succeeds was not removed: its overlap
// with the next holder is not excused, and told-at-once fails, whatever
// network fault came near.
func TestForceExcusesUntilARenewalSucceeds(t *testing.T) {
	delay := faultEvents(FaultDelay, -1, 0, 50)
	renewed := cat(grantEvents(0, 1, 0, 10, 400), delay, forceEvents(100, 10), renewEvents(0, 150, 10, 550),
		grantEvents(1, 1, 200, 11, 400), releaseEvents(0, 2, 300), releaseEvents(1, 2, 400))
	got := checkerNames(Analyze(renewed, checkParams))
	for _, want := range []string{"exclusion", "told-at-once"} {
		if !slices.Contains(got, want) {
			t.Errorf("a holder that renewed after its force: %s did not fail (%v)", want, got)
		}
	}
	told := cat(grantEvents(0, 1, 0, 10, 400), delay, forceEvents(100, 10), doneEvents(0, 110, 10), releaseEvents(0, 2, 115),
		grantEvents(1, 1, 200, 11, 400), releaseEvents(1, 2, 400))
	if got := checkerNames(Analyze(told, checkParams)); len(got) != 0 {
		t.Errorf("a forced holder told at once: %v", got)
	}
}

// TestToldFirstChecksDoneAgainstTheHoldersDeadline: a holder still holding at
// its local deadline is told then, whether or not another grant follows, and
// a stop of its worker that healed before the deadline excuses nothing.
func TestToldFirstChecksDoneAgainstTheHoldersDeadline(t *testing.T) {
	lateRelease := []Event{{T: ms(600), Proc: 0, Op: OpRelease, Type: Invoke, ID: 2, Key: "k"}, {T: ms(601), Proc: 0, Op: OpRelease, Type: Fail, ID: 2, Key: "k"}}
	kill := faultEvents(FaultKill, 0, 700, 701)
	for _, tc := range []struct {
		name  string
		h     []Event
		fails bool
	}{
		{"never told, released late", cat(grantEvents(0, 1, 0, 10, 400), lateRelease), true},
		{"never told, killed after the next grant, stopped before", cat(grantEvents(0, 1, 0, 10, 400), faultEvents(FaultStop, 0, 50, 100), grantEvents(1, 1, 500, 11, 400), kill, releaseEvents(1, 2, 800)), true},
		{"told at the deadline", cat(grantEvents(0, 1, 0, 10, 400), doneEvents(0, 405, 10), lateRelease), false},
		{"told at the deadline, killed later", cat(grantEvents(0, 1, 0, 10, 400), faultEvents(FaultStop, 0, 50, 100), doneEvents(0, 405, 10), grantEvents(1, 1, 500, 11, 400), kill, releaseEvents(1, 2, 800)), false},
		{"stopped across the deadline", cat(grantEvents(0, 1, 0, 10, 400), faultEvents(FaultStop, 0, 350, 650), grantEvents(1, 1, 500, 11, 400), kill, releaseEvents(1, 2, 800)), false},
	} {
		if v := Analyze(tc.h, checkParams).ToldFirst(); (v != nil) != tc.fails {
			t.Errorf("%s: violation %+v, want one: %v", tc.name, v, tc.fails)
		}
	}
}

// TestStarvationCountsAWorkerThatNeverGetsTheLock: a worker whose waits all
// fail while the others are granted the key is starved, though the grants
// the others got are spread evenly.
func TestStarvationCountsAWorkerThatNeverGetsTheLock(t *testing.T) {
	h := func(last string) []Event {
		var parts [][]Event
		for i := range int64(30) {
			p := int(i % 3)
			parts = append(parts, grantEvents(p, 2*i+1, 100*i, uint64(10+i), 400), releaseEvents(p, 2*i+2, 100*i+50))
		}
		parts = append(parts, waitEvents(3, 1, 120, 1100, Fail, 0), waitEvents(3, 2, 1200, 2100, Fail, 0), waitEvents(3, 3, 2200, 2950, last, 99))
		return cat(parts...)
	}
	if v := Analyze(h(Fail), checkParams).Starvation(); v == nil {
		t.Error("a worker starved of four went unseen")
	}
	if v := Analyze(h(OK), checkParams).Starvation(); v != nil {
		t.Errorf("a worker served at last: %s", v.Msg)
	}
}

// TestLockDelayCountsALateReleaseAsUnclean: a release sent after the holder's
// deadline does not skip the delay, even when the store accepted it.
func TestLockDelayCountsALateReleaseAsUnclean(t *testing.T) {
	p := checkParams
	p.Delay = 500 * time.Millisecond
	late := cat(grantEvents(0, 1, 0, 10, 90), releaseEvents(0, 2, 200), grantEvents(1, 1, 300, 11, 400), releaseEvents(1, 2, 400))
	if v := Analyze(late, p).LockDelay(); v == nil {
		t.Error("a grant within the delay after a release sent past the deadline went unseen")
	}
	clean := cat(grantEvents(0, 1, 0, 10, 90), releaseEvents(0, 2, 50), grantEvents(1, 1, 300, 11, 400), releaseEvents(1, 2, 400))
	if v := Analyze(clean, p).LockDelay(); v != nil {
		t.Errorf("after a release sent before the deadline: %s", v.Msg)
	}
}

// TestFairnessIsExcusedOnlyByFaultsOfTheWaiters: on the fair lock, an
// arrival order broken near a fault that hit neither waiter nor the store is
// a violation.
func TestFairnessIsExcusedOnlyByFaultsOfTheWaiters(t *testing.T) {
	p := checkParams
	p.Kind = "fair"
	h := func(f []Event) []Event {
		return cat(f, waitEvents(0, 1, 0, 900, OK, 12), waitEvents(1, 1, 200, 500, OK, 11))
	}
	if v := Analyze(h(faultEvents(FaultStop, 3, 100, 150)), p).Fairness(); v == nil {
		t.Error("a waiter served before an earlier one went unseen across another worker's stop")
	}
	if v := Analyze(h(faultEvents(FaultStop, 0, 100, 150)), p).Fairness(); v != nil {
		t.Errorf("the earlier waiter stopped while it waited: %s", v.Msg)
	}
}

// TestCheckRunsTheLinearizabilityCheck: Check runs porcupine's check, and a
// history porcupine cannot decide in time is not proven, a violation.
func TestCheckRunsTheLinearizabilityCheck(t *testing.T) {
	w := func(p int, id int64, t int64, tok uint64, typ string) []Event {
		return rwEvents(p, id, t, OpWrite, tok, 1, typ)
	}
	stale := cat(w(0, 1, 0, 11, OK), w(1, 1, 10, 10, OK))
	var got []string
	for _, v := range Analyze(stale, checkParams).Check() {
		got = append(got, v.Checker)
	}
	if !slices.Contains(got, "linearizable") {
		t.Errorf("Check did not run the linearizability check: %v", got)
	}
	// Many concurrent writes of unknown outcome, then reads none of them
	// explains: porcupine has many orders to try.
	var parts [][]Event
	for i := range 60 {
		parts = append(parts, rwEvents(i, 1, 0, OpWrite, uint64(100+i), int64(1+i), Info))
	}
	for i := range 20 {
		parts = append(parts, rwEvents(100+i, 1, 10+int64(i)*2, OpRead, 0, int64(1000+i), OK))
	}
	if v := Analyze(cat(parts...), checkParams).Linearizable("", time.Millisecond); v == nil || !strings.Contains(v.Msg, "not proven") {
		t.Errorf("a history porcupine could not decide in 1 ms: %+v", v)
	}
}

// syncEv is worker proc's event of op at tm ms.
func syncEv(tm int64, proc int, op, typ string, id, value int64) Event {
	return Event{T: ms(tm), Proc: proc, Op: op, Type: typ, ID: id, Value: value}
}

// TestLatchFindsALostWakeUp: a Wait that was waiting when the latch opened
// and timed out long after it lost its wake-up.
func TestLatchFindsALostWakeUp(t *testing.T) {
	h := func(failAt int64) []Event {
		return lined([]Event{
			syncEv(10, 0, OpWait, Invoke, 1, 0),
			syncEv(20, 1, OpCountDown, Invoke, 1, 0), syncEv(21, 1, OpCountDown, OK, 1, 0),
			syncEv(failAt, 0, OpWait, Fail, 1, 0),
		})
	}
	if len(Analyze(h(6010), syncParams).Latch(1)) == 0 {
		t.Error("a Wait that timed out 6 s after the latch opened passed")
	}
	if v := Analyze(h(500), syncParams).Latch(1); len(v) != 0 {
		t.Errorf("a Wait that ended soon after the latch opened: %v", v)
	}
}

// TestLatchChecksTheCountsReturned: count-downs return each count above zero
// once, below n, in the order they ran.
func TestLatchChecksTheCountsReturned(t *testing.T) {
	down := func(proc int, t0, left int64) []Event {
		return []Event{syncEv(t0, proc, OpCountDown, Invoke, 1, 0), syncEv(t0+1, proc, OpCountDown, OK, 1, left)}
	}
	for name, h := range map[string][]Event{
		"a count returned twice": cat(down(0, 10, 2), down(1, 20, 2), down(2, 30, 0)),
		"a count out of range":   cat(down(0, 10, 3), down(1, 20, 1), down(2, 30, 0)),
		"counts going up":        cat(down(0, 10, 1), down(1, 20, 2), down(2, 30, 0)),
	} {
		if len(Analyze(h, syncParams).Latch(3)) == 0 {
			t.Errorf("%s passed", name)
		}
	}
	if v := Analyze(cat(down(0, 10, 2), down(1, 20, 1), down(2, 30, 0), down(3, 40, 0)), syncParams).Latch(3); len(v) != 0 {
		t.Errorf("good counts: %v", v)
	}
}

// TestBarrierDoesNotCountAPartyKilledLongBefore: a party killed in Enter
// counts as arrived for a TTL at most (its arrival lapses).
func TestBarrierDoesNotCountAPartyKilledLongBefore(t *testing.T) {
	h := func(enterAt int64) []Event {
		return cat([]Event{
			syncEv(0, 0, OpEnter, Invoke, 1, 0),
			{T: ms(100), Proc: -1, Op: OpNemesis, Fault: "kill", Target: 0},
			syncEv(200, 1, OpEnter, Invoke, 1, 0),
			syncEv(enterAt+10, 1, OpEnter, OK, 1, 0),
		})
	}
	if len(Analyze(h(5000), syncParams).Barrier(2)) == 0 {
		t.Error("a party entered with the other killed 5 s before")
	}
	if v := Analyze(h(300), syncParams).Barrier(2); len(v) != 0 {
		t.Errorf("a party entered with the other killed within the TTL: %v", v)
	}
}

// TestLostWriteFailsWhenNoFinalReadSucceeded: a key whose final reads all
// failed cannot show a lost write: that fails.
func TestLostWriteFailsWhenNoFinalReadSucceeded(t *testing.T) {
	failed := cat(rwEvents(0, 1, 0, OpWrite, 10, 1, OK), rwEvents(-1, 1, 20, OpRead, 0, 0, Info))
	if v := Analyze(failed, checkParams).LostWrite(); v == nil {
		t.Error("a key whose final read failed passed")
	}
	retried := cat(rwEvents(0, 1, 0, OpWrite, 10, 1, OK), rwEvents(-1, 1, 20, OpRead, 0, 0, Info), rwEvents(-1, 2, 30, OpRead, 0, 1, OK))
	if v := Analyze(retried, checkParams).LostWrite(); v != nil {
		t.Errorf("a final read that succeeded when tried again: %s", v.Msg)
	}
}

// TestCheckRefusesASemaphoreWithoutPermits: Params of a semaphore without N
// are a violation of their own, not a panic.
func TestCheckRefusesASemaphoreWithoutPermits(t *testing.T) {
	h := cat(grantEvents(0, 1, 0, 10, 400), releaseEvents(0, 2, 100), grantEvents(1, 1, 110, 11, 400), releaseEvents(1, 2, 200))
	vs := Analyze(h, Params{Kind: "sem", TTL: 400 * time.Millisecond}).Check()
	if len(vs) != 1 || vs[0].Checker != "params" {
		t.Errorf("violations %+v, want params", vs)
	}
}

// TestExitsFailsAWorkerThatDiedOtherwiseThanKilled: a worker process that
// exits non-zero (a failure, a panic) is in the history with its log and
// fails the run; one killed by SIGKILL (the nemesis's kill, the final stop)
// or that exits cleanly is not.
func TestExitsFailsAWorkerThatDiedOtherwiseThanKilled(t *testing.T) {
	dir := t.TempDir()
	rec, err := NewRecorder(filepath.Join(dir, "nemesis.jsonl"), -1)
	if err != nil {
		t.Fatal(err)
	}
	ws := &procs{pids: make([]int, 5), rec: rec}
	for i, script := range []string{"echo panic: boom >&2; exit 2", "kill -9 $$", "exit 0", "kill -TERM $$", "kill -TERM $$"} {
		if i == 4 {
			ws.stop = true // the final stop: its SIGTERM may kill a worker not yet handling it
		}
		logPath := filepath.Join(dir, fmt.Sprintf("w%02d.log", i))
		logs, err := os.Create(logPath)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintln(logs, "the previous life's line")
		from := logSize(logs)
		cmd := exec.Command("sh", "-c", script)
		cmd.Stdout, cmd.Stderr = logs, logs
		ws.exited(i, cmd.Run(), logPath, from)
		logs.Close()
	}
	rec.Close()
	h, err := ReadHistory(dir)
	if err != nil {
		t.Fatal(err)
	}
	v := Analyze(h, checkParams).Exits()
	if v == nil || !strings.Contains(v.Msg, "worker 0's") || !strings.Contains(v.Msg, "panic: boom") || strings.Contains(v.Msg, "previous life") {
		t.Fatalf("the worker that exited 2: %+v", v)
	}
	if len(h) != 2 || h[1].Target != 3 {
		t.Errorf("exits recorded %v, want those of workers 0 and 3 (a SIGTERM before the final stop)", h)
	}
}

// TestDoneIsMatchedByItsKey: a Done of another key's lease with the same
// token tells nothing of this one.
func TestDoneIsMatchedByItsKey(t *testing.T) {
	h := func(key string) []Event {
		return cat(grantEvents(0, 1, 0, 10, 400), []Event{{T: ms(402), Proc: 0, Op: OpDone, Key: key, Token: 10}},
			grantEvents(1, 1, 500, 11, 400), releaseEvents(1, 2, 600))
	}
	if v := Analyze(h("j"), checkParams).ToldFirst(); v == nil {
		t.Error("a holder never told passed on the Done of another key")
	}
	if v := Analyze(h("k"), checkParams).ToldFirst(); v != nil {
		t.Errorf("a holder told at its deadline: %s", v.Msg)
	}
}

// TestAResizeOfUnknownOutcomeEnds: a resize of unknown outcome may have
// landed, but not past a later resize invoked well after it returned.
func TestAResizeOfUnknownOutcomeEnds(t *testing.T) {
	p := checkParams
	p.Kind, p.N = "sem", 2
	unknown := []Event{{T: ms(20), Proc: -1, Op: OpResize, Type: Invoke, ID: 1, Key: "k", Value: 3},
		{T: ms(2020), Proc: -1, Op: OpResize, Type: Info, ID: 1, Key: "k", Value: 3}}
	h := func(at int64) []Event {
		return cat(unknown, resizeEvents(2, 4100, 2), grantEvents(0, 1, at-200, 10, 400), grantEvents(1, 1, at-190, 11, 400),
			grantEvents(2, 1, at, 12, 400), releaseEvents(0, 2, at+100), releaseEvents(1, 2, at+150), releaseEvents(2, 2, at+250))
	}
	if v := Analyze(h(4200), p).Exclusion(); v == nil {
		t.Error("a third holder under a size of 2, the resize to 3 of unknown outcome long overridden, went unseen")
	}
	if v := Analyze(h(3000), p).Exclusion(); v != nil {
		t.Errorf("a third holder while the resize to 3 of unknown outcome may be in force: %s", v.Msg)
	}
}

// TestSpuriousLossInTheLeasesLastQuarter: a holding lost 50 ms before its
// deadline (within the last quarter of a 400 ms TTL) with no fault near is
// an early loss too.
func TestSpuriousLossInTheLeasesLastQuarter(t *testing.T) {
	h := func(doneAt int64) []Event {
		return cat(grantEvents(0, 1, 0, 10, 400), doneEvents(0, doneAt, 10), releaseEvents(0, 2, doneAt+5))
	}
	if v := Analyze(h(350), checkParams).SpuriousLoss(); v == nil {
		t.Error("a loss 50 ms before the deadline went unseen")
	}
	if v := Analyze(h(400), checkParams).SpuriousLoss(); v != nil {
		t.Errorf("a loss at the deadline: %s", v.Msg)
	}
}

// TestForceOfAGrantWhoseReplyWasOnItsWay: a force-unlock that names a grant
// by its token and completed while the grant's reply was still on its way
// (the store granted first) removed that holding: the holder's Done right
// after its reply is no spurious loss, and told-at-once counts from the
// reply. A Done that never fires after such a reply still fails.
func TestForceOfAGrantWhoseReplyWasOnItsWay(t *testing.T) {
	acquire := []Event{
		{T: ms(0), Proc: 0, Op: OpAcquire, Type: Invoke, ID: 1, Key: "k", Mode: "wait"},
		{T: ms(30), Proc: 0, Op: OpAcquire, Type: OK, ID: 1, Key: "k", Mode: "wait", Token: 10, Deadline: ms(400)},
	}
	told := cat(acquire, forceEvents(10, 10), doneEvents(0, 32, 10), releaseEvents(0, 2, 40))
	if got := checkerNames(Analyze(told, checkParams)); len(got) != 0 {
		t.Errorf("a holder told of a force just after its grant's reply: %v, want no violation", got)
	}
	never := cat(acquire, forceEvents(10, 10), grantEvents(1, 1, 200, 11, 400), releaseEvents(1, 2, 300))
	if got := checkerNames(Analyze(never, checkParams)); !slices.Contains(got, "told-at-once") {
		t.Errorf("a holder never told of a force of its grant: %v, want told-at-once", got)
	}
}

// TestAGrantRacingItsKillEndsWithTheKill: a worker whose grant's reply came
// as the nemesis killed it (the grant recorded after the kill was invoked,
// before it completed) holds nothing past the kill, and is not flagged for
// never being told at its deadline when its next life starts later.
func TestAGrantRacingItsKillEndsWithTheKill(t *testing.T) {
	kill := []Event{
		{T: ms(0), Proc: -1, Op: OpNemesis, Type: Invoke, Fault: FaultKill, Target: 0},
		{T: ms(3), Proc: -1, Op: OpNemesis, Type: OK, Fault: FaultKill, Target: 0},
	}
	start := []Event{{T: ms(700), Proc: 0, Op: OpStart}}
	h := cat(kill, grantEvents(0, 1, 1, 10, 400), start)
	if v := Analyze(h, checkParams).ToldFirst(); v != nil {
		t.Fatalf("a grant killed with its process: %s", v.Msg)
	}
	// The same grant without the kill is a holder never told.
	if v := Analyze(cat(grantEvents(0, 1, 1, 10, 400), start), checkParams).ToldFirst(); v == nil {
		t.Fatal("a holder never told went unseen")
	}
}

// TestAStallOfTheHolderExcusesALateDone: a Done seen 186 ms after the
// deadline is excused by a stall of the holder's own process across the
// deadline (its timers could not fire), and by nothing else: not by another
// worker's stall, and a stall counts as no injected fault.
func TestAStallOfTheHolderExcusesALateDone(t *testing.T) {
	stall := func(proc int) []Event {
		return []Event{
			{T: ms(330), Proc: proc, Op: OpNemesis, Type: Invoke, Fault: FaultStall, Target: proc},
			{T: ms(586), Proc: proc, Op: OpNemesis, Type: OK, Fault: FaultStall, Target: proc},
		}
	}
	late := cat(grantEvents(0, 1, 0, 10, 400), doneEvents(0, 587, 10), releaseEvents(0, 2, 590))
	if v := Analyze(late, checkParams).ToldFirst(); v == nil {
		t.Fatal("a Done 186 ms late went unseen")
	}
	a := Analyze(cat(late, stall(1)), checkParams)
	if v := a.ToldFirst(); v == nil {
		t.Error("another worker's stall excused the holder's late Done")
	}
	a = Analyze(cat(late, stall(0)), checkParams)
	if v := a.ToldFirst(); v != nil {
		t.Errorf("the holder's own stall across its deadline: %s", v.Msg)
	}
	if a.Stats.Faults != 0 || a.Stats.ByFault[FaultStall] != 1 {
		t.Errorf("faults %d (by fault %v): a stall is seen, not injected", a.Stats.Faults, a.Stats.ByFault)
	}
}

// TestWorkersRecordTheirStalls: a worker's stall watch records a time its
// process was not scheduled (here: stopped for 200 ms) as a stall of that
// worker.
func TestWorkersRecordTheirStalls(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "w03.jsonl")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), stallWatchEnv+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil { // "watching"
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGSTOP)
	time.Sleep(200 * time.Millisecond) // the stall's length, not a wait for an event
	cmd.Process.Signal(syscall.SIGCONT)
	var a *Analysis
	testserver.Eventually(t, 5*time.Second, "the stall recorded", func() bool {
		h, err := ReadHistory(dir)
		a = Analyze(h, checkParams)
		return err == nil && a.Stats.ByFault[FaultStall] > 0
	})
	f := a.faults[0]
	if f.name != FaultStall || f.target != 3 || time.Duration(f.end-f.start) < 150*time.Millisecond {
		t.Fatalf("recorded %+v, want a stall of worker 3 of 150 ms or more", f)
	}
	cmd.Process.Signal(syscall.SIGTERM)
}

// TestAGrantForcedBeforeItsReplyOverlapsNobody: the force names worker 0's
// token and completes before worker 0's grant reply arrives; worker 1 is
// granted the key between the two. Worker 0's holding was gone from the store
// before worker 1's grant: neither exclusion nor told-first is broken, and
// told-at-once still requires worker 0 to be told (as the long run found: a
// force, the next grant 1 ms later, the forced grant's reply 26 ms later, its
// Done 18 ms after that).
func TestAGrantForcedBeforeItsReplyOverlapsNobody(t *testing.T) {
	acquire := []Event{
		{T: ms(0), Proc: 0, Op: OpAcquire, Type: Invoke, ID: 1, Key: "k", Mode: "wait"},
		{T: ms(40), Proc: 0, Op: OpAcquire, Type: OK, ID: 1, Key: "k", Mode: "wait", Token: 10, Deadline: ms(400)},
	}
	other := grantEvents(1, 1, 12, 11, 400)
	told := cat(acquire, forceEvents(10, 10), other, doneEvents(0, 58, 10), releaseEvents(0, 2, 60), releaseEvents(1, 2, 200))
	if got := checkerNames(Analyze(told, checkParams)); len(got) != 0 {
		t.Errorf("a grant forced before its reply came, told 18 ms after it: %v, want no violation", got)
	}
	never := cat(acquire, forceEvents(10, 10), other, releaseEvents(1, 2, 200), releaseEvents(0, 2, 300))
	if got := checkerNames(Analyze(never, checkParams)); !slices.Contains(got, "told-at-once") {
		t.Errorf("a grant forced before its reply came and never told: %v, want told-at-once", got)
	}
}

// TestAGrantOverWhenSeenOverlapsNobody: worker 1's grant reply reaches it
// after its deadline (the long run: a black hole, then a stall, 147 ms past
// it); its holder is told at once and holds nothing, so worker 0's holding
// meanwhile is neither overlapped nor owed a Done.
func TestAGrantOverWhenSeenOverlapsNobody(t *testing.T) {
	late := []Event{
		{T: ms(0), Proc: 1, Op: OpAcquire, Type: Invoke, ID: 1, Key: "k", Mode: "wait"},
		{T: ms(550), Proc: 1, Op: OpAcquire, Type: OK, ID: 1, Key: "k", Mode: "wait", Token: 10, Deadline: ms(400)},
		{T: ms(551), Proc: 1, Op: OpDone, Key: "k", Token: 10},
	}
	h := cat(late, grantEvents(0, 1, 402, 11, 400), releaseEvents(1, 2, 560), releaseEvents(0, 2, 600))
	if got := checkerNames(Analyze(h, checkParams)); len(got) != 0 {
		t.Errorf("a grant over when its holder saw it: %v, want no violation", got)
	}
	// Seen 10 ms before its deadline, it overlaps worker 0's for 10 ms.
	late[1].Deadline = ms(560)
	h = cat(late, grantEvents(0, 1, 402, 11, 400), releaseEvents(1, 2, 560), releaseEvents(0, 2, 600))
	if got := checkerNames(Analyze(h, checkParams)); !slices.Contains(got, "exclusion") {
		t.Errorf("a grant still valid when seen, beside another: %v, want exclusion", got)
	}
}
