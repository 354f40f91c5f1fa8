package verify

import (
	"slices"
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
	stop bool // no worker is started again
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
