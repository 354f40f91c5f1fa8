package verify

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// procs are the worker processes of a run, by worker number (0: not running),
// as the keep loops of a run (Run) or of an operator's run (Operate) record
// them.
type procs struct {
	mu   sync.Mutex
	pids []int
	stop bool      // no worker is started again
	rec  *Recorder // where an exit other than a clean one or a kill goes (nil: nowhere)
}

// exited records in the history how worker i's process ended, when it ended
// otherwise than cleanly (exit status 0), by SIGKILL (the nemesis's kill, or
// the final stop's) or, once the final stop began, by its SIGTERM (a worker
// just started again may not handle it yet): a worker that failed (exit
// status 1), panicked (exit status 2) or died of another signal, with what
// that life wrote to its log (from byte from of logPath: its stderr), which
// the checkers report (see Analysis.Exits).
func (ws *procs) exited(i int, err error, logPath string, from int64) {
	var ee *exec.ExitError
	if err == nil || ws.rec == nil || !errors.As(err, &ee) {
		return
	}
	if st, ok := ee.Sys().(syscall.WaitStatus); ok && st.Signaled() {
		ws.mu.Lock()
		stopping := ws.stop
		ws.mu.Unlock()
		if st.Signal() == syscall.SIGKILL || st.Signal() == syscall.SIGTERM && stopping {
			return
		}
	}
	ws.rec.Record(Event{Op: OpExit, Type: Fail, Target: i, Err: fmt.Sprintf("%v: %s", err, logTail(logPath, from))})
}

// keep runs worker i of spec, again each time it exits, until ctx ends: the
// process command returns for each of its lives (s.Proc, s.Life set). A life
// that failed at once (an exit status other than 0, within a second: the
// store refused it, say) is not started again before a second passed. Its
// stderr, when it is a file, is the log whose end an exit other than a clean
// one or a kill records (see exited).
func (ws *procs) keep(ctx context.Context, spec Spec, i int, command func(s Spec) *exec.Cmd) error {
	for life := 0; ctx.Err() == nil; life++ {
		s := spec
		s.Proc, s.Life = i, life
		cmd := command(s)
		var (
			logPath string
			from    int64
		)
		if f, ok := cmd.Stderr.(*os.File); ok {
			logPath, from = f.Name(), logSize(f)
		}
		ws.mu.Lock()
		if ws.stop {
			ws.mu.Unlock()
			return nil
		}
		err := cmd.Start()
		if err == nil {
			ws.pids[i] = cmd.Process.Pid
		}
		ws.mu.Unlock()
		if err != nil {
			return err
		}
		started := time.Now()
		err = cmd.Wait()
		ws.exited(i, err, logPath, from)
		ws.mu.Lock()
		ws.pids[i] = 0
		ws.mu.Unlock()
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() > 0 && time.Since(started) < time.Second {
			wait(ctx, time.Second) // it failed at once: not again at once
		}
	}
	return nil
}

// logSize returns the size of the log f: where the next life's lines begin.
func logSize(f *os.File) int64 {
	st, err := f.Stat()
	if err != nil {
		return 0
	}
	return st.Size()
}

// logTail returns the end of the log at path from byte from on (2 kB at
// most).
func logTail(path string, from int64) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	b = b[min(from, int64(len(b))):]
	b = b[max(0, len(b)-2048):]
	return strings.TrimSpace(string(b))
}

// signal sends sig to worker i; it reports whether the worker was running.
func (ws *procs) signal(i int, sig syscall.Signal) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.pids[i] == 0 {
		return false
	}
	return syscall.Kill(ws.pids[i], sig) == nil
}

// stopAll asks every worker to finish its round and exit (SIGCONT first: one
// may be stopped), and kills those still running 10 s later.
func (ws *procs) stopAll() {
	ws.mu.Lock()
	ws.stop = true
	pids := slices.Clone(ws.pids)
	ws.mu.Unlock()
	for _, p := range pids {
		if p != 0 {
			_ = syscall.Kill(p, syscall.SIGCONT)
			_ = syscall.Kill(p, syscall.SIGTERM)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		ws.mu.Lock()
		running := slices.ContainsFunc(ws.pids, func(p int) bool { return p != 0 })
		ws.mu.Unlock()
		if !running {
			return
		}
		time.Sleep(20 * time.Millisecond) // polling the exits the keep loops record
	}
	for i := range ws.pids {
		ws.signal(i, syscall.SIGKILL)
	}
}
