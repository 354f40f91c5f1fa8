package verify

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testserver"
)

// syncWorkerEnv makes a test binary a latch or barrier worker: it holds the
// worker's SyncSpec as JSON.
const syncWorkerEnv = "DLOCK_VERIFY_SYNC_WORKER"

// maybeSyncWorker runs a latch or barrier worker and exits, when the process
// is one (TestMain calls it: the backend table is complete only once every
// file's init has run).
func maybeSyncWorker() {
	v := os.Getenv(syncWorkerEnv)
	if v == "" {
		return
	}
	var s SyncSpec
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		fmt.Fprintln(os.Stderr, "verify sync worker:", err)
		os.Exit(2)
	}
	b, err := backendOf(s.Backend)
	if err == nil && b.sync == nil {
		err = fmt.Errorf("verify: no latches or barriers on %s", s.Backend)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "verify sync worker:", err)
		os.Exit(1)
	}
	d, closeD, err := b.sync(s)
	if err == nil {
		defer closeD()
		err = RunSyncWorker(context.Background(), s, d)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "verify sync worker:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// syncRound starts one worker process per role on the latch or barrier of
// spec, kills and pauses some of them at random, and returns the history.
func syncRound(t *testing.T, spec SyncSpec, roles []string, rng *rand.Rand) []Event {
	t.Helper()
	spec.Dir = t.TempDir()
	rec, err := NewRecorder(spec.Dir+"/nemesis.jsonl", -1)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	cmds := make([]*exec.Cmd, len(roles))
	for i, role := range roles {
		s := spec
		s.Proc, s.Role = i, role
		b, _ := json.Marshal(s)
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), syncWorkerEnv+"="+string(b))
		cmd.Stderr = os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i] = cmd
	}
	var wg sync.WaitGroup
	killed := -1
	if rng.IntN(2) == 0 { // kill one
		i, after := rng.IntN(len(cmds)), time.Duration(rng.Int64N(int64(spec.Hold)))
		killed = i
		wg.Go(func() {
			time.Sleep(after) // a random moment of the round
			rec.Record(Event{Op: OpNemesis, Fault: "kill", Target: i})
			_ = cmds[i].Process.Kill()
		})
	}
	if rng.IntN(2) == 0 { // pause one, shorter than a third of the TTL
		i, after := rng.IntN(len(cmds)), time.Duration(rng.Int64N(int64(spec.Hold)))
		d := time.Duration(rng.Int64N(int64(spec.TTL/3))) + time.Millisecond
		wg.Go(func() {
			time.Sleep(after)
			rec.Record(Event{Op: OpNemesis, Fault: "pause", Target: i})
			if cmds[i].Process.Signal(syscall.SIGSTOP) == nil {
				time.Sleep(d)
				_ = cmds[i].Process.Signal(syscall.SIGCONT)
			}
		})
	}
	wg.Wait()
	for i, cmd := range cmds {
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			// A worker that failed otherwise than by the round's kill ran
			// nothing worth checking: the round cannot decide.
			if err != nil && i != killed {
				t.Errorf("worker %d (%s) exited: %v", i, roles[i], err)
			}
		case <-time.After(3*spec.Timeout + 10*time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("a worker outlived its timeouts")
		}
	}
	h, err := ReadHistory(spec.Dir)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestSyncWorkload runs latch and barrier rounds on Redis and PostgreSQL with
// workers killed and paused, and checks each round's history.
func TestSyncWorkload(t *testing.T) {
	stores := map[string]func(t *testing.T) []string{
		"redis":    func(t *testing.T) []string { return []string{testserver.StartRedis(t).Addr} },
		"postgres": func(t *testing.T) []string { return []string{testserver.StartPostgres(t).URL} },
	}
	for _, backend := range []string{"redis", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			addr := stores[backend](t)
			for _, seed := range seeds(1, 3) {
				rng := rand.New(rand.NewPCG(seed, 7))
				base := SyncSpec{Backend: backend, Addr: addr, TTL: time.Second, Timeout: 6 * time.Second, Hold: 600 * time.Millisecond, Seed: seed}
				t.Run(fmt.Sprintf("latch-seed%d", seed), func(t *testing.T) {
					s := base
					s.Name, s.N = fmt.Sprintf("latch-%d", seed), 2
					h := syncRound(t, s, []string{RoleWait, RoleWait, RoleCountDown, RoleCountDown}, rng)
					for _, v := range Analyze(h, Params{TTL: s.TTL}).Latch(s.N) {
						t.Error(v.Format(h))
					}
				})
				t.Run(fmt.Sprintf("barrier-seed%d", seed), func(t *testing.T) {
					s := base
					s.Name, s.N = fmt.Sprintf("barrier-%d", seed), 3
					h := syncRound(t, s, []string{RoleParty, RoleParty, RoleParty}, rng)
					for _, v := range Analyze(h, Params{TTL: s.TTL}).Barrier(s.N) {
						t.Error(v.Format(h))
					}
				})
			}
		})
	}
}

// syncParams are the Params of the checkers' own latch and barrier histories.
var syncParams = Params{TTL: time.Second}

// TestSyncCheckersCatch: the checkers find a Wait released early, a Wait that
// missed an open latch, a barrier that let some parties through and not
// others, and a Leave that returned with a party inside.
func TestSyncCheckersCatch(t *testing.T) {
	ev := func(line int, tm int64, proc int, op, typ string, id, value int64) Event {
		return Event{Line: line, T: tm, Proc: proc, Op: op, Type: typ, ID: id, Value: value}
	}
	early := []Event{
		ev(1, 10, 0, OpWait, Invoke, 1, 0),
		ev(2, 20, 1, OpCountDown, Invoke, 1, 0), ev(3, 21, 1, OpCountDown, OK, 1, 1),
		ev(4, 22, 0, OpWait, OK, 1, 0),
		ev(5, 30, 2, OpCountDown, Invoke, 1, 0), ev(6, 31, 2, OpCountDown, OK, 1, 0),
	}
	missed := []Event{
		ev(1, 20, 1, OpCountDown, Invoke, 1, 0), ev(2, 21, 1, OpCountDown, OK, 1, 0),
		ev(3, 30, 0, OpWait, Invoke, 1, 0), ev(4, 90, 0, OpWait, Fail, 1, 0),
	}
	if len(Analyze(early, syncParams).Latch(2)) == 0 {
		t.Error("Latch passed a Wait that returned before the count reached zero")
	}
	if len(Analyze(missed, syncParams).Latch(1)) == 0 {
		t.Error("Latch passed a Wait that timed out on an open latch")
	}
	if v := Analyze(early[1:3], syncParams).Latch(2); len(v) != 0 {
		t.Errorf("Latch failed a history without a release: %v", v)
	}
	partial := []Event{
		ev(1, 10, 0, OpEnter, Invoke, 1, 0), ev(2, 11, 1, OpEnter, Invoke, 1, 0),
		ev(3, 20, 0, OpEnter, OK, 1, 0), ev(4, 30, 1, OpEnter, Fail, 1, 0),
	}
	if len(Analyze(partial, syncParams).Barrier(2)) == 0 {
		t.Error("Barrier passed a barrier that released one party of two")
	}
	inside := []Event{
		ev(1, 10, 0, OpEnter, Invoke, 1, 0), ev(2, 11, 1, OpEnter, Invoke, 1, 0),
		ev(3, 20, 0, OpEnter, OK, 1, 0), ev(4, 21, 1, OpEnter, OK, 1, 0),
		ev(5, 30, 0, OpLeave, Invoke, 2, 0), ev(6, 31, 0, OpLeave, OK, 2, 0),
		ev(7, 40, 1, OpLeave, Invoke, 2, 0), ev(8, 41, 1, OpLeave, OK, 2, 0),
	}
	if len(Analyze(inside, syncParams).Barrier(2)) == 0 {
		t.Error("Barrier passed a Leave that returned with a party inside")
	}
	if v := Analyze(inside[:4], syncParams).Barrier(2); len(v) != 0 {
		t.Errorf("Barrier failed a good history: %v", v)
	}
}
