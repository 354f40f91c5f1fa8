package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/dlocktest"
	"github.com/redis/go-redis/v9"
)

// TestRunLeavesNoDeadWaiter: a run that gives up waiting (--wait runs out:
// exit 75, or interrupted) takes its process off the plain lock's waiting set
// before it exits, and status shows no waiter; a run killed while waiting
// (SIGKILL: no exit path of its own) is not shown as a waiter, and the next
// release hands the lock to the live waiter at once, not at the holder's TTL
// (40 s). Before, the exit-75 run left its entry, status showed it, and the
// release woke it instead of the live waiter, which slept out the TTL.
func TestRunLeavesNoDeadWaiter(t *testing.T) {
	rdb := newRDB(t)
	ctx := context.Background()
	key := dlocktest.Key(t)
	waitingSet := "dlock:{" + key + "}:waiting"
	_, _, ready := startHolder(t, []string{"--ttl", "40s"}, key, `echo ok > "$1"; while [ ! -e "$1.release" ]; do sleep 0.05; done`)
	inSet := func(n int64) func() bool {
		return func() bool { return rdb.ZCard(ctx, waitingSet).Val() == n }
	}
	waiters := func() int {
		r := dlockRun(t, "status", "--json", key)
		var st lockInfo
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
			t.Fatalf("status --json: %v\n%s", err, r.stdout)
		}
		return st.Waiters
	}

	r := dlockRun(t, "run", "--wait", "1s", key, "--", "true")
	if r.code != exitNotObtained {
		t.Fatalf("run --wait 1s on a held lock: exit %d, want %d; %s", r.code, exitNotObtained, r.stderr)
	}
	if n := rdb.ZCard(ctx, waitingSet).Val(); n != 0 {
		t.Errorf("exit 75 left %d entries on the waiting set, want none", n)
	}
	if n := waiters(); n != 0 {
		t.Errorf("status after an exit 75 shows %d waiters, want none", n)
	}

	interrupted := dlockCmd(t, "run", key, "--", "true")
	if err := interrupted.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the run to wait on the set", inSet(1))
	_ = interrupted.Process.Signal(syscall.SIGINT)
	_ = interrupted.Wait()
	if code := childCode(interrupted.ProcessState); code != 128+int(syscall.SIGINT) {
		t.Errorf("interrupted run: exit %d", code)
	}
	if n := rdb.ZCard(ctx, waitingSet).Val(); n != 0 {
		t.Errorf("an interrupted run left %d entries on the waiting set, want none", n)
	}

	killed := dlockCmd(t, "run", key, "--", "true")
	if err := killed.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the doomed run to wait on the set", inSet(1))
	killedID := rdb.ZRange(ctx, waitingSet, 0, 0).Val()[0]
	_ = killed.Process.Kill()
	_ = killed.Wait()
	waitFor(t, "status to show no waiter", func() bool { return waiters() == 0 })

	live := dlockCmd(t, "run", key, "--", "true")
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the live run to wait on the set", inSet(2))
	if n := waiters(); n != 1 {
		t.Errorf("status with a killed and a live waiter shows %d waiters, want 1", n)
	}
	// Both wait behind one holding, and tie: the killed run goes first.
	if err := rdb.ZAddXX(ctx, waitingSet, redis.Z{Score: 0, Member: killedID}).Err(); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	if err := os.WriteFile(ready+".release", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	res := wait(t, live, released, new(bytes.Buffer), new(bytes.Buffer))
	if res.code != 0 {
		t.Errorf("the live run: exit %d", res.code)
	}
	if d := time.Since(released); d > 5*time.Second {
		t.Errorf("the live run got the lock %v after the release, want at once (the holder's TTL was 40s)", d.Round(time.Millisecond))
	}
}
