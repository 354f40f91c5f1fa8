package verify

import (
	"context"
	"math/rand/v2"
	"slices"
	"syscall"
	"time"
)

// Faults the nemesis injects.
const (
	FaultStop     = "stop"     // SIGSTOP a worker, SIGCONT it later
	FaultKill     = "kill"     // SIGKILL a worker (it is started again)
	FaultCrash    = "crash"    // SIGKILL the lock store and start it again
	FaultSnapshot = "snapshot" // with RDB, a crash's snapshot shortly before it
	// FaultStall is not injected: a worker records it when its own process
	// was not scheduled for 50 ms or more (a loaded host), and the checkers
	// take it as a pause of that worker.
	FaultStall = "stall"
	// FaultPowerLoss is a crash of the machine under a Redis that logs its
	// writes (AOF, appendfsync everysec): what the log got in the last
	// moments before it (from a snapshot event on, until a grant came, half
	// the TTL to twice the TTL at most, a second at most: less than what
	// everysec may lose) was acknowledged to the clients but never reached
	// the disk, and is gone when the server starts again. It lasts from the
	// kill to the restart.
	FaultPowerLoss = "power-loss"
	FaultFailover  = "failover" // cut replication, kill the primary, promote the lagging replica
	// FaultReset cuts every connection between the workers and the lock
	// store (through the proxies they dial).
	FaultReset = "reset"
	// FaultDelay holds back what flows between the workers and the store
	// (requests, replies, or both; on Redlock, the traffic of some of the
	// masters) by a few milliseconds up to a third of the TTL, for a while;
	// then it heals.
	FaultDelay = "delay"
	// FaultBlackhole stops every byte between the workers and the store (on
	// Redlock and etcd, some of the masters or members: a minority or a
	// majority) for between a quarter of the TTL and twice the TTL; the
	// connections stay open, and new ones are accepted but get nothing. Then
	// it heals.
	FaultBlackhole = "blackhole"
	// FaultDropRequests is a one-way partition: what the workers send to
	// the store (to some of the nodes, drawn as for a black hole) stops,
	// what the store sends back flows on, for as long as a black hole
	// lasts. Then it heals and what was held flows on.
	FaultDropRequests = "drop-requests"
	// FaultDropReplies is the other way's: the workers' requests reach the
	// store, its replies stop.
	FaultDropReplies = "drop-replies"
	// FaultExpire black-holes the workers' ZooKeeper connections for longer
	// than the session timeout, so that the server expires their sessions.
	FaultExpire = "expire"
	// FaultPartition cuts one etcd member off for a while: the traffic of
	// the connections dialled to it, its peers' and the workers', is
	// black-holed in both directions (connections it dials to the others
	// are not: the cut is of what reaches and leaves it through its own
	// addresses).
	FaultPartition = "partition"
	// FaultTerminate ends every client connection of PostgreSQL (pg_terminate_backend).
	FaultTerminate = "terminate"
	// FaultForce force-unlocks a held key through the backend's Inspector,
	// over a connection of the test process's own to the store (not
	// through the proxies), as an operator's dlock unlock --force does: the
	// event names the key and the holding removed (Token, Owner).
	FaultForce = "force"
)

// draws are what the nemesis drew for one round, used or not: a seed replays
// the same draws whatever the processes did. A store fault (see nemesis.store)
// takes its durations and its node from them.
type draws struct {
	Target int           // the worker a stop or a kill hits
	Long   time.Duration // TTL/2..2·TTL: a pause, a delay, an outage
	Short  time.Duration // 0..TTL/2: a crashed server's time down
	Lag    time.Duration // TTL/8..TTL/3: writes a replica misses
	Pick   int           // the node (server, shard, member) a store fault hits
	Up     time.Duration // a delay's requests' (0: none)
	Down   time.Duration // a delay's replies' (0: none)
	Hole   time.Duration // TTL/4..2·TTL: a black hole's time
	Expire time.Duration // 3/2·TTL..5/2·TTL: longer than a session
	Cut    []int         // the nodes a delay or a black hole hits (none: every one)
	Rng    *rand.Rand    // for a draw of the store fault's own, made only when it is injected
}

// nemesis injects faults at random, from its seed: the workers' and the
// network's itself (stop, kill, reset, delay, black hole), the store's
// through store. Both the tests' runs and an operator's run (Operate) use it.
type nemesis struct {
	seed    uint64
	ttl     time.Duration
	workers int
	faults  []string
	procs   *procs
	proxies []*Proxy // between the workers and the store, one per node
	nodes   int      // how many nodes a store fault picks from (0: one)
	rec     *Recorder
	// store injects store fault f (any fault but the ones above), healed
	// before it returns; it reports whether it did (false: the store does
	// not take it, or there was nothing to do), and an error that ends the
	// nemesis. Nil: no store faults.
	store func(ctx context.Context, f string, d draws) (bool, error)
}

// run injects faults until ctx ends; every fault is healed before it
// returns. It returns the error of a store fault that failed.
func (n *nemesis) run(ctx context.Context) error {
	rng := rand.New(rand.NewPCG(n.seed, 0x6e656d))
	ttl := n.ttl
	// between draws from [lo, hi] (lo when the range is empty: a TTL too
	// short for the fault's floor).
	between := func(lo, hi time.Duration) time.Duration {
		return lo + time.Duration(rng.Int64N(int64(max(hi-lo, 0))+1))
	}
	for wait(ctx, between(ttl/2, 2*ttl)) {
		// Every draw is made each round, used or not, so that a seed
		// replays the same choices whatever the processes did.
		f := n.faults[rng.IntN(len(n.faults))]
		var d draws
		d.Target = rng.IntN(n.workers)
		d.Long, d.Short, d.Lag = between(ttl/2, 2*ttl), between(0, ttl/2), between(ttl/8, ttl/3)
		d.Pick = rng.IntN(max(n.nodes, 1))
		d.Up, d.Down = delays(rng.IntN(3), between(2*time.Millisecond, ttl/3))
		d.Hole, d.Expire = between(ttl/4, 2*ttl), between(3*ttl/2, 5*ttl/2)
		d.Cut = cutNodes(rng, len(n.proxies))
		d.Rng = rng
		switch f {
		case FaultStop:
			if !n.procs.signal(d.Target, syscall.SIGSTOP) {
				continue
			}
			n.rec.Record(Event{Op: OpNemesis, Type: Invoke, Fault: f, Target: d.Target})
			wait(ctx, d.Long) // a pause past the TTL, or not; cut short at the run's end
			n.procs.signal(d.Target, syscall.SIGCONT)
			n.rec.Record(Event{Op: OpNemesis, Type: OK, Fault: f, Target: d.Target})
		case FaultKill:
			n.rec.Record(Event{Op: OpNemesis, Type: Invoke, Fault: f, Target: d.Target})
			n.procs.signal(d.Target, syscall.SIGKILL)
			n.rec.Record(Event{Op: OpNemesis, Type: OK, Fault: f, Target: d.Target})
		case FaultReset:
			if len(n.proxies) == 0 {
				continue
			}
			n.rec.Record(Event{Op: OpNemesis, Type: Invoke, Fault: f, Target: -1})
			cut := 0
			for _, p := range n.proxies {
				cut += p.Reset()
			}
			n.rec.Record(Event{Op: OpNemesis, Type: OK, Fault: f, Target: -1, Cut: cut})
		case FaultDelay, FaultBlackhole, FaultDropRequests, FaultDropReplies:
			if len(n.proxies) == 0 {
				continue
			}
			e := Event{Op: OpNemesis, Type: Invoke, Fault: f, Target: -1, Nodes: d.Cut}
			dur, ps := d.Hole, pickProxies(n.proxies, d.Cut)
			if f == FaultDelay {
				dur, e.Delay, e.ReplyDelay = d.Long, d.Up, d.Down
			}
			n.rec.Record(e)
			for _, p := range ps {
				switch f {
				case FaultDelay:
					p.SetDelay(d.Up, d.Down)
				default:
					p.SetOneWay(f != FaultDropReplies, f != FaultDropRequests)
				}
			}
			wait(ctx, dur) // the fault lasts; healed below
			for _, p := range ps {
				p.Heal()
			}
			e.Type = OK
			n.rec.Record(e)
		default:
			if n.store == nil {
				continue
			}
			if _, err := n.store(ctx, f, d); err != nil {
				return err
			}
		}
	}
	return nil
}

// wait waits d, or until ctx ends; it reports whether d passed.
func wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// delays returns the delays of requests and replies that a FaultDelay of d
// sets: both ways (dir 0), requests only (1) or replies only (2).
func delays(dir int, d time.Duration) (up, down time.Duration) {
	switch dir {
	case 1:
		return d, 0
	case 2:
		return 0, d
	}
	return d, d
}

// cutNodes draws the nodes (of n) that a delay or a black hole hits: all of
// one, else between one and all of them, a minority or a majority, at random.
func cutNodes(rng *rand.Rand, n int) []int {
	perm, k := rng.Perm(max(n, 1)), 1+rng.IntN(max(n, 1))
	if n <= 1 {
		return nil // the only server: no need to name it
	}
	nodes := perm[:k]
	slices.Sort(nodes)
	return nodes
}

// pickProxies returns the proxies of nodes (every one when nodes is empty).
func pickProxies(ps []*Proxy, nodes []int) []*Proxy {
	if len(nodes) == 0 {
		return ps
	}
	var out []*Proxy
	for _, n := range nodes {
		out = append(out, ps[n])
	}
	return out
}
