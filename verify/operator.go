package verify

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// ClientFaults are the faults Operate injects by default: the ones a run
// against a store somebody else runs may inject, since they touch nothing but
// its own processes and connections.
var ClientFaults = []string{FaultStop, FaultKill, FaultReset, FaultDelay}

// RunWorkerLocker is RunWorker with a Locker the caller built (the dlock
// command's own connection to a store, Sentinel and Cluster included) instead
// of one NewLocker makes from s.
func RunWorkerLocker(ctx context.Context, s Spec, lk dlock.Locker) error {
	rec, err := NewRecorder(filepath.Join(s.Dir, fmt.Sprintf("w%02d-%d.jsonl", s.Proc, s.Life)), s.Proc)
	if err != nil {
		return err
	}
	defer rec.Close()
	res := redis.NewClient(redisOptions(s.Resource))
	defer res.Close()
	fence, err := redislock.NewFence(res)
	if err != nil {
		return err
	}
	w := &worker{s: s, rng: rand.New(rand.NewPCG(s.Seed, uint64(s.Proc)<<32|uint64(s.Life))), rec: rec, lk: lk, res: res, fence: fence}
	rec.Record(Event{Op: OpStart})
	for ctx.Err() == nil {
		w.round(ctx)
	}
	return nil
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

// Properties checks the history h of a run of lock kind with ttl, and returns
// the outcome of each checker by name, the resource's linearizability last
// (its HTML rendering of a failure goes to htmlPath).
func Properties(h []Event, kind string, ttl time.Duration, htmlPath string) ([]Property, Stats) {
	a := Analyze(h, Params{Kind: kind, TTL: ttl, Bound: time.Second})
	lin := a.Linearizable(htmlPath, 20*time.Second)
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
	}
	return ps, a.Stats
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
	ows := &opWorkers{procs{pids: make([]int, c.Workers)}}
	wctx, wcancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, c.Workers)
	for i := range c.Workers {
		wg.Go(func() {
			if err := ows.keep(wctx, spec, i, c.Command); err != nil {
				errs <- err
			}
		})
	}
	rctx, rcancel := context.WithTimeout(ctx, c.Duration)
	defer rcancel()
	if len(c.Faults) > 0 {
		opNemesis(rctx, c, ows, rec)
	}
	<-rctx.Done()
	wcancel()
	ows.stopAll()
	wg.Wait()
	finalReads(rec, redisOptions(spec.Resource), spec.Keys)
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// opWorkers are the worker processes of an Operate run.
type opWorkers struct{ procs }

// keep runs worker i, again each time it exits, until ctx ends.
func (ws *opWorkers) keep(ctx context.Context, spec Spec, i int, command func(Spec) *exec.Cmd) error {
	for life := 0; ctx.Err() == nil; life++ {
		s := spec
		s.Proc, s.Life = i, life
		cmd := command(s)
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
		ws.mu.Lock()
		ws.pids[i] = 0
		ws.mu.Unlock()
		if err != nil && time.Since(started) < time.Second {
			// It failed at once (the store refused it, say): not again
			// at once.
			t := time.NewTimer(time.Second)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
	}
	return nil
}

// opNemesis injects c.Faults at random, from c.Seed, until ctx ends; every
// fault is healed before it returns.
func opNemesis(ctx context.Context, c OperatorConfig, ws *opWorkers, rec *Recorder) {
	rng := rand.New(rand.NewPCG(c.Seed, 0x6e656d))
	ttl := c.Spec.TTL
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	wait := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	for wait(between(ttl/2, 2*ttl)) {
		// Every draw is made each round, used or not, so that a seed
		// replays the same choices.
		f := c.Faults[rng.IntN(len(c.Faults))]
		target := rng.IntN(c.Workers)
		long, lag := between(ttl/2, 2*ttl), between(ttl/8, ttl/3)
		up, down := delays(rng.IntN(3), lag)
		nodes := cutNodes(rng, len(c.Proxies)) // the servers a delay hits
		switch f {
		case FaultStop:
			if !ws.signal(target, syscall.SIGSTOP) {
				continue
			}
			rec.Record(Event{Op: OpNemesis, Type: Invoke, Fault: f, Target: target})
			wait(long) // a pause past the TTL, or not; cut short at the run's end
			ws.signal(target, syscall.SIGCONT)
			rec.Record(Event{Op: OpNemesis, Type: OK, Fault: f, Target: target})
		case FaultKill:
			rec.Record(Event{Op: OpNemesis, Type: Invoke, Fault: f, Target: target})
			ws.signal(target, syscall.SIGKILL)
			rec.Record(Event{Op: OpNemesis, Type: OK, Fault: f, Target: target})
		case FaultReset:
			if len(c.Proxies) == 0 {
				continue
			}
			rec.Record(Event{Op: OpNemesis, Type: Invoke, Fault: f, Target: -1})
			for _, p := range c.Proxies {
				p.Reset()
			}
			rec.Record(Event{Op: OpNemesis, Type: OK, Fault: f, Target: -1})
		case FaultDelay:
			if len(c.Proxies) == 0 {
				continue
			}
			e := Event{Op: OpNemesis, Type: Invoke, Fault: f, Target: -1, Nodes: nodes, Delay: up, ReplyDelay: down}
			rec.Record(e)
			cut := pickProxies(c.Proxies, nodes)
			for _, p := range cut {
				p.SetDelay(up, down)
			}
			wait(long)
			for _, p := range cut {
				p.Heal()
			}
			e.Type = OK
			rec.Record(e)
		}
	}
}
