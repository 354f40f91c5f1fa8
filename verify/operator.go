package verify

import (
	"context"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
)

// ClientFaults are the faults Operate injects by default: the ones a run
// against a store somebody else runs may inject, since they touch nothing but
// its own processes and connections.
var ClientFaults = []string{FaultStop, FaultKill, FaultReset, FaultDelay}

// RunWorkerLocker runs the worker loop of s with lk, a Locker the caller
// built (the dlock command's own connection to a store, Sentinel and Cluster
// included), until ctx ends: the loop the suite's own workers run.
func RunWorkerLocker(ctx context.Context, s Spec, lk dlock.Locker) error {
	return runWorker(ctx, s, lk, Breakage{})
}

// OperatorConfig is a run against a store that is already running: worker
// processes started by Command, and the client-side faults only.
type OperatorConfig struct {
	Spec     Spec // the workers' template: Keys, TTL, Hold, Wait, ExitProb, Resource, Dir
	Workers  int
	Duration time.Duration
	Seed     uint64
	Faults   []string // of ClientFaults; none: no faults
	Proxies  []*Proxy // the proxies between the workers and the store (resets and delays)
	// Command returns the command that runs worker s (it is started, and
	// started again when it exits, until the run ends).
	Command func(s Spec) *exec.Cmd
}

// Property is one checked property and its outcome.
type Property struct {
	Name      string
	What      string     // what it checks, in a line
	Violation *Violation // nil: it holds
}

// Properties checks the history h of a run against a store somebody else
// runs, with p (Kind, TTL, and Leftover: what was left of the run's locks
// once every worker ended and a TTL passed; Bound is a second when 0), and
// returns the outcome of each checker by name, the resource's
// linearizability (its HTML rendering of a failure goes to p.HTML) and the
// liveness of the store last, with the Analysis they came from (its Stats,
// and its Timelines for a page per key).
func Properties(h []Event, p Params) ([]Property, *Analysis) {
	if p.Bound == 0 {
		p.Bound = time.Second
	}
	if p.LinTimeout == 0 {
		p.LinTimeout = 20 * time.Second
	}
	a := Analyze(h, p)
	lin := a.Linearizable(p.HTML, p.LinTimeout)
	ps := []Property{
		{Name: "fencing", What: "no token is granted twice, and a grant the store must have made first has the smaller token", Violation: a.Fencing()},
		{Name: "resource", What: "the resource never accepts a token below one it accepted", Violation: a.Resource()},
		{Name: "lost-write", What: "no read, the final one of each key included, misses an acknowledged write", Violation: a.LostWrite()},
		{Name: "exclusion", What: "no two holders' validity windows overlap", Violation: a.Exclusion()},
		{Name: "spurious-loss", What: "no lease is lost while nothing disturbs its holder", Violation: a.SpuriousLoss()},
		{Name: "told-first", What: "a holder's Done fires at its local deadline, and before another grant of the key completes", Violation: a.ToldFirst()},
		{Name: "told-at-once", What: "a force-unlocked holder's Done fires within TTL/6 (1 s at most) of the force", Violation: a.ToldAtOnce()},
		{Name: "hand-over", What: "a released or dead holder's key is granted again within TTL plus a bound", Violation: a.Handover()},
		{Name: "fairness", What: "waiters are served in arrival order where promised", Violation: a.Fairness()},
		{Name: "starvation", What: "no worker waits without ever getting the lock", Violation: a.Starvation()},
		{Name: "linearizable", What: "the resource's history is linearizable as a register", Violation: lin},
		{Name: "liveness", What: "nothing of the run's locks is left on the store once every worker ended and a TTL passed", Violation: a.Liveness()},
	}
	return ps, a
}

// Operate runs c until its Duration passes or ctx ends: it keeps the workers
// running and injects c.Faults from c.Seed; it returns after every worker has
// exited and every fault is healed. The history is in c.Spec.Dir.
func Operate(ctx context.Context, c OperatorConfig) error {
	rec, err := NewRecorder(filepath.Join(c.Spec.Dir, "nemesis.jsonl"), -1)
	if err != nil {
		return err
	}
	defer rec.Close()
	spec := c.Spec
	spec.Seed = c.Seed
	ws := &procs{pids: make([]int, c.Workers)}
	wctx, wcancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, c.Workers)
	for i := range c.Workers {
		wg.Go(func() {
			if err := ws.keep(wctx, spec, i, c.Command); err != nil {
				errs <- err
			}
		})
	}
	rctx, rcancel := context.WithTimeout(ctx, c.Duration)
	defer rcancel()
	if len(c.Faults) > 0 {
		n := &nemesis{seed: c.Seed, ttl: spec.TTL, workers: c.Workers, faults: c.Faults, procs: ws,
			proxies: c.Proxies, nodes: len(c.Proxies), rec: rec}
		_ = n.run(rctx) // no store faults: nothing fails
	}
	<-rctx.Done()
	wcancel()
	ws.stopAll()
	wg.Wait()
	finalReads(rec, redisOptions(spec.Resource), spec.Keys)
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}
