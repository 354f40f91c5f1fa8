package verify

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testserver"
	"go.uber.org/goleak"
)

var (
	seedFlag  = flag.Uint64("seed", 0, "replay this seed only (0: the quick run's seeds, or -seeds of them)")
	seedsFlag = flag.Int("seeds", 0, "run this many seeds per scenario (0: the quick run's)")
	durFlag   = flag.Duration("duration", 0, "each run's workload time (0: the quick run's)")
	pagesFlag = flag.String("pages", "", "write every run's timelines (a page per key) under this directory, in one directory per test and seed")
)

func TestMain(m *testing.M) {
	maybeWorker()     // a worker process exits here
	maybeStallWatch() // and a stall watch alone here
	maybeSyncWorker() // and a latch or barrier worker here
	flag.Parse()
	goleak.VerifyTestMain(tableM{m})
}

// tableM runs the tests, then writes the table of the scenarios run (-table).
type tableM struct{ m *testing.M }

// Run runs the tests and writes the table.
func (t tableM) Run() int {
	prebuild()
	code := t.m.Run()
	prebuilds.Wait()
	removeBinaries()
	if *tableFlag != "" {
		if err := writeTable(*tableFlag); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	return code
}

// seeds returns the seeds to run: -seed alone, else -seeds of them from
// first, else quick.
func seeds(first uint64, quick int) []uint64 {
	if *seedFlag != 0 {
		return []uint64{*seedFlag}
	}
	n := quick
	if *seedsFlag > 0 {
		n = *seedsFlag
	}
	var out []uint64
	for i := range n {
		out = append(out, first+uint64(i))
	}
	return out
}

func duration(quick time.Duration) time.Duration {
	if *durFlag > 0 {
		return *durFlag
	}
	return quick
}

// rwReaders is the scenarios' lock kind of the read-write lock with readers:
// half the rounds take the read side.
const rwReaders = "rw+readers"

// delayed is the scenarios' lock kind of the plain lock with a lock-delay
// (quickDelay).
const delayed = "plain+delay"

// handOff and once are the scenarios' kinds of the plain lock's hand-off
// and Once workloads (Spec.Workload).
const (
	handOff = "plain+handoff"
	once    = "plain+once"
)

// quickDelay is the lock-delay of the quick runs' delayed locks.
const quickDelay = 500 * time.Millisecond

// quickSpec is the workers' template of the quick runs: short TTLs.
func quickSpec(kind string) Spec {
	s := Spec{Backend: "redis", Kind: kind, Keys: []string{"a", "b"}, TTL: 400 * time.Millisecond,
		Hold: 250 * time.Millisecond, Wait: 1500 * time.Millisecond, ExitProb: 0.05, N: 2}
	switch kind {
	case rwReaders:
		s.Kind, s.ReadShare = "rw", 0.5
	case delayed:
		// Waiters wait out a holder's expiry and its delay.
		s.Kind, s.LockDelay, s.Wait = "plain", quickDelay, 3*time.Second
	case handOff:
		s.Kind, s.Workload = "plain", WorkloadHandOff
	case once:
		// One key that every worker calls for: most calls wait for a
		// computation under way.
		s.Kind, s.Workload, s.Keys = "plain", WorkloadOnce, []string{"a"}
	}
	if kind == semResize {
		s.Kind, s.Resize = "sem", true
	}
	return s
}

// scenario is one backend and primitive with the faults it runs under.
type scenario struct {
	name    string
	backend string
	kind    string
	faults  []string
	persist string
	replica bool
	masters int
	props   string // the properties checked, for the table
	// clockToken: the scenario needs the plain lock's tokens to take the
	// server clock into account after a released record (a crash or
	// failover that lost the last grant).
	clockToken bool
}

// zkForcesScenario force-unlocks ZooKeeper holdings with a lock-delay and
// nothing else, with a TTL long enough that a holder that is told only at its
// next renewal misses told-at-once's bound on most forces.
const zkForcesScenario = "zookeeper-lock-delay-forces"

var holderFaults = []string{FaultStop, FaultKill, FaultReset, FaultDelay, FaultBlackhole}

// forceFaults are FaultForce and holderFaults: an operator's force-unlock of a
// held key, whose holder must be told at once.
var forceFaults = append([]string{FaultForce}, holderFaults...)

// The order of a repertoire decides which of its faults a seed's draws pick:
// the etcd, ZooKeeper and PostgreSQL scenarios, whose 1 s TTL leaves room for
// one or two faults in the quick run's 5 s, list a network fault first so that
// the quick run's seed injects it (a partition, a session expiry, a black hole);
// FaultForce sits where it leaves the quick run's draws as they were without
// it (etcd-3's partition and leader crash): longer runs draw it. The
// ZooKeeper lock-delay scenario lists FaultForce first, so that the quick run
// force-unlocks a holding with a lock-delay (and then black-holes the
// connections): its holder must be told at once, the next one wait out the
// delay.

var scenarios = []scenario{
	{"redis-plain", "redis", "plain", forceFaults, "", false, 0, "fencing, resource, exclusion, told-first, told-at-once (force-unlocks), linearizable, liveness", false},
	{"redis-plain-aof", "redis", "plain", []string{FaultStop, FaultPowerLoss}, "aof", false, 0, "fencing, resource, linearizable (exclusion excused across power losses: the log cut back to where it was before the last grant)", true},
	{"redis-plain-rdb", "redis", "plain", []string{FaultStop, FaultCrash}, "rdb", false, 0, "fencing, resource, linearizable (exclusion excused across crashes)", true},
	{"redis-fair-aof", "redis", "fair", []string{FaultStop, FaultPowerLoss}, "aof", false, 0, "fencing, resource, linearizable (exclusion excused across power losses: the log cut back to where it was before the last grant)", false},
	{"redis-fair-rdb", "redis", "fair", []string{FaultStop, FaultCrash}, "rdb", false, 0, "fencing, resource, linearizable (exclusion excused across crashes)", false},
	{"redis-fair", "redis", "fair", forceFaults, "", false, 0, "fencing, resource, exclusion, told-first, told-at-once (force-unlocks), linearizable, liveness, arrival order", false},
	{"redis-reentrant", "redis", "reentrant", forceFaults, "", false, 0, "fencing, resource, exclusion, told-first, told-at-once (force-unlocks), linearizable, liveness", false},
	{"redis-rw-writers", "redis", "rw", forceFaults, "", false, 0, "fencing, resource, exclusion (a writer alone), told-first, told-at-once (force-unlocks), linearizable, liveness", false},
	{"redis-semaphore-2", "redis", "sem", forceFaults, "", false, 0, "fencing, at most 2 holders, told-at-once (a force-unlock removes every holder: each is told), liveness", false},
	{"redis-semaphore-resize", "redis", semResize, forceFaults, "", false, 0, "fencing, at most the size in force at each grant (resized among 1 to 3 during the run), told-at-once (a force-unlock removes every holder, not the size: each is told), liveness", false},
	{"redis-fair-failover", "redis", "fair", []string{FaultStop, FaultFailover}, "", true, 0, "fencing, resource, linearizable (exclusion excused across failovers)", false},
	{"redlock-5", "redlock", "plain", []string{FaultForce, FaultStop, FaultKill, FaultCrash, FaultDelay, FaultBlackhole, FaultDropRequests, FaultDropReplies}, "", false, 5, "fencing, resource, exclusion (one master crashed at a time: excused; node partitions, one-way partitions and delays of a minority or a majority: not), told-first, told-at-once (force-unlocks on every master), linearizable, liveness", false},
	{forceGapScenario, "redis", "plain", []string{FaultForce}, "", false, 0, "fencing, resource, exclusion, told-first, told-at-once (each force-unlock published while every subscription connection is dropped: the holders find the loss when subscribed again), linearizable, liveness", false},
	{"memlock", "memlock", "plain", []string{FaultForce}, "", false, 0, "fencing, resource, exclusion, told-first, told-at-once (force-unlocks), linearizable, liveness (worker goroutines: one process)", false},
	{"etcd-3", "etcd", "plain", []string{FaultPartition, FaultStop, FaultKill, FaultForce, FaultCrash, FaultDelay, FaultBlackhole}, "", false, 0, "fencing, resource, exclusion (no fault excused), told-first, told-at-once (force-unlocks), linearizable, liveness (keys and leases)", false},
	{"zookeeper", "zookeeper", "plain", []string{FaultExpire, FaultStop, FaultKill, FaultCrash, FaultDelay, FaultBlackhole, FaultForce}, "", false, 0, "fencing, resource, exclusion (no fault excused), told-first, told-at-once (force-unlocks), linearizable, liveness (ephemeral nodes)", false},
	{"zookeeper-3", "zookeeper-3", "plain", []string{FaultCrash, FaultExpire, FaultStop, FaultKill, FaultDelay, FaultBlackhole, FaultForce}, "", false, 0, "fencing, resource, exclusion (no fault excused), told-first, told-at-once (force-unlocks), linearizable, liveness (ephemeral nodes; three servers, the leader killed)", false},
	{"postgres", "postgres", "plain", []string{FaultBlackhole, FaultStop, FaultKill, FaultDelay, FaultTerminate, FaultCrash, FaultForce}, "", false, 0, "fencing, resource, exclusion (no fault excused), told-first, told-at-once (force-unlocks), linearizable, liveness (rows)", false},
	{"mysql", "mysql", "plain", []string{FaultBlackhole, FaultStop, FaultKill, FaultDelay, FaultTerminate, FaultCrash, FaultForce}, "", false, 0, "fencing, resource, exclusion (no fault excused), told-first, told-at-once (force-unlocks), linearizable, liveness (rows; MariaDB 10.11)", false},
	{"mysql-fair", "mysql", "fair", []string{FaultBlackhole, FaultStop, FaultKill, FaultDelay, FaultTerminate, FaultCrash, FaultForce}, "", false, 0, "fencing, resource, exclusion (no fault excused), told-first, told-at-once (force-unlocks), linearizable, liveness, arrival order (rows; MariaDB 10.11)", false},
	{"postgres-semaphore-resize", "postgres", semResize, []string{FaultBlackhole, FaultStop, FaultKill, FaultDelay, FaultTerminate}, "", false, 0, "fencing, at most the size in force at each grant (resized among 1 to 3 during the run), liveness (rows)", false},
	{"legacy", "legacy", "plain", []string{FaultKill}, "", false, 0, "fencing, resource, exclusion, told-first, linearizable, liveness", false},
	{"valkey-plain", "valkey", "plain", append([]string{FaultDropRequests, FaultDropReplies}, holderFaults...), "", false, 0, "fencing, resource, exclusion, told-first, linearizable, liveness (valkey-server)", false},
	{"valkey-fair", "valkey", "fair", holderFaults, "", false, 0, "fencing, resource, exclusion, told-first, linearizable, liveness, arrival order (valkey-server)", false},
	{"redis-plain-sentinel", "redis-sentinel", "plain", []string{FaultForce, FaultStop, FaultFailover}, "", false, 0, "fencing, resource, told-at-once (force-unlocks on the primary), linearizable, liveness (Sentinel failover to a lagging replica: exclusion excused)", true},
	{"redis-cluster", "redis-cluster", "plain", []string{FaultForce, FaultStop, FaultKill, FaultCrash}, "", false, 0, "fencing, resource, told-at-once (force-unlocks on the key's master, published to every node), linearizable, liveness (3 masters with a replica each; a master crash after its replica was cut off for a lag, and the replica's takeover at once: exclusion excused)", true},
	{"redis-rw-readers", "redis", rwReaders, forceFaults, "", false, 0, "fencing, resource, exclusion (a writer alone, readers together), told-first, told-at-once (a force-unlock removes every reader: each is told), linearizable (reads under read locks), liveness", false},
	{"valkey-rw-readers", "valkey", rwReaders, holderFaults, "", false, 0, "fencing, resource, exclusion (a writer alone, readers together), told-first, linearizable (reads under read locks), liveness (valkey-server)", false},
	{"redis-plain-lock-delay", "redis", delayed, holderFaults, "", false, 0, "fencing, resource, exclusion, told-first, lock-delay (no grant within the delay after a holding ended without a release), linearizable, liveness", false},
	{"memlock-lock-delay", "memlock", delayed, nil, "", false, 0, "fencing, resource, exclusion, told-first, lock-delay, linearizable, liveness (worker goroutines: one process)", false},
	{"etcd-3-lock-delay", "etcd", delayed, []string{FaultPartition, FaultStop, FaultKill, FaultCrash, FaultDelay, FaultBlackhole}, "", false, 0, "fencing, resource, exclusion, told-first, lock-delay (counted from the next acquisition's sight of the unclean end), linearizable, liveness (keys and leases)", false},
	{"zookeeper-lock-delay", "zookeeper", delayed, []string{FaultForce, FaultExpire, FaultStop, FaultKill, FaultCrash, FaultDelay, FaultBlackhole}, "", false, 0, "fencing, resource, exclusion, told-first, told-at-once (force-unlocks of delayed holdings), lock-delay (counted from the next acquisition's sight of the unclean end, a force's too), linearizable, liveness (ephemeral nodes)", false},
	{zkForcesScenario, "zookeeper", delayed, []string{FaultForce}, "", false, 0, "told-at-once (force-unlocks of delayed holdings alone; 3 s TTL, 2 s holds, the bound 150 ms), fencing, resource, exclusion, told-first, lock-delay, linearizable, liveness", false},
	{"nats", "nats", "plain", []string{FaultBlackhole, FaultStop, FaultKill, FaultDelay, FaultForce, FaultDropRequests, FaultDropReplies}, "", false, 0, "fencing, resource, exclusion (no fault excused), told-first, told-at-once (force-unlocks), linearizable, liveness (keys of the bucket)", false},
	{"nats-default-sync", "nats-default-sync", "plain", []string{FaultStop, FaultPowerLoss}, "", false, 0, "fencing (a token repeated across a power loss excused: the lost writes' revisions are handed out again), resource, linearizable (exclusion excused across power losses: the store directory put back to a copy taken before the last grant; default sync)", false},
	{"nats-power-loss", "nats", "plain", []string{FaultStop, FaultPowerLoss, FaultForce}, "", false, 0, "fencing, resource, exclusion (no fault excused), told-first, told-at-once (force-unlocks, after restarts too), linearizable, liveness (keys of the bucket; sync on every write: a power loss loses nothing)", false},
	{"nats-3", "nats-3", "plain", []string{FaultCrash, FaultBlackhole, FaultStop, FaultKill, FaultDelay, FaultForce}, "", false, 0, "fencing, resource, exclusion (no fault excused), told-first, told-at-once (force-unlocks), linearizable, liveness (keys of the bucket; three servers, three replicas, the stream leader shut down)", false},
	{"redis-handoff", "redis", handOff, forceFaults, "", false, 0, "hand-off (resumed holdings: never after their TTL, a newer grant or a force; no renewal after Detach), fencing, resource, exclusion, told-first (resumed holdings too), told-at-once, linearizable, liveness", false},
	{"redis-once", "redis", once, forceFaults, "", false, 0, "once (every value returned one computation's; at most one computation per result window but for a computer that died or lost its lock), liveness", false},
	{"postgres-handoff", "postgres", handOff, []string{FaultBlackhole, FaultStop, FaultKill, FaultDelay, FaultTerminate, FaultForce}, "", false, 0, "hand-off, fencing, resource, exclusion (no fault excused), told-first (resumed holdings too), told-at-once, linearizable, liveness (rows)", false},
	{"postgres-once", "postgres", once, []string{FaultStop, FaultKill, FaultBlackhole, FaultDelay, FaultTerminate, FaultForce}, "", false, 0, "once, liveness (rows)", false},
	{"etcd-3-once", "etcd", once, []string{FaultStop, FaultKill, FaultPartition, FaultForce, FaultDelay, FaultBlackhole}, "", false, 0, "once (results live whole seconds: their end is not judged), liveness (keys and leases)", false},
	{"redlock-5-handoff", "redlock", handOff, []string{FaultForce, FaultCrash, FaultDelay, FaultBlackhole}, "", false, 5, "hand-off (resumed holdings on a majority of five masters), fencing, resource, exclusion (one master crashed at a time: excused), told-first (resumed holdings too), told-at-once, linearizable, liveness", false},
	{"etcd-3-handoff", "etcd", handOff, []string{FaultStop, FaultKill, FaultPartition, FaultForce, FaultDelay, FaultBlackhole}, "", false, 0, "hand-off, fencing, resource, exclusion (no fault excused), told-first (resumed holdings too), told-at-once, linearizable, liveness (keys and leases)", false},
	{"nats-handoff", "nats", handOff, []string{FaultBlackhole, FaultStop, FaultKill, FaultDelay, FaultForce}, "", false, 0, "hand-off, fencing, resource, exclusion (no fault excused), told-first (resumed holdings too), told-at-once, linearizable, liveness (keys of the bucket)", false},
	{"memlock-handoff", "memlock", handOff, []string{FaultForce}, "", false, 0, "hand-off, fencing, resource, exclusion, told-first (resumed holdings too), told-at-once, linearizable, liveness (worker goroutines: one process)", false},
	{"memlock-once", "memlock", once, []string{FaultForce}, "", false, 0, "once, liveness (worker goroutines: one process)", false},
	{"postgres-lock-delay", "postgres", delayed, []string{FaultBlackhole, FaultStop, FaultKill, FaultDelay, FaultTerminate, FaultCrash}, "", false, 0, "fencing, resource, exclusion, told-first, lock-delay, linearizable, liveness (rows)", false},
}

// longRunOnly are the scenarios the quick run leaves out (each starts a
// store of its own for a workload that another store's quick scenario runs
// too: PostgreSQL's lock-delay and resized semaphore, the slowest of the
// quick run at 23 to 50 s, beside Redis's, etcd's and ZooKeeper's; MySQL's
// fair lock beside Redis's): they run when -seeds, -seed or -duration is
// given.
var longRunOnly = map[string]bool{"postgres-handoff": true, "redlock-5-handoff": true, "postgres-once": true, "etcd-3-once": true, "memlock-handoff": true,
	"postgres-lock-delay": true, "postgres-semaphore-resize": true, "etcd-3-handoff": true, "nats-handoff": true, "mysql-fair": true,
	"nats-power-loss": true}

// forceGapScenario is the scenario whose force-unlocks drop the workers'
// subscriptions as they publish the loss (Config.ForceGap): the nosubcheck
// variant's faults, on the plain lock itself.
const forceGapScenario = "redis-plain-force-resubscribe"

// forceGapTiming sets the timing of the workers of Config.ForceGap: a 1 s TTL,
// whose told-at-once bound (167 ms) leaves room for what a holder does after
// its subscription dropped (the Client waits 10 ms before it reads again; the
// new connection; the check; every waiter woken at once, its wake-up
// subscription dropped too), which took 15 to 69 ms on the loaded 2-core test
// host, beyond the 67 ms of a 400 ms TTL now and then; the holds are longer
// than that bound, so that a holder left to its renewal (every 333 ms) is
// still holding when the bound passes.
func forceGapTiming(s *Spec) {
	s.TTL, s.Hold, s.Wait = time.Second, 600*time.Millisecond, 3*time.Second
}

// configure sets what sc's backend needs beyond the scenario's fields: the
// valkey-server executable (it skips t when there is none) or the Redis
// topology, and the workload's time; and the force-unlocks' dropped
// subscriptions of forceGapScenario.
func (sc scenario) configure(t *testing.T, c *Config) {
	if sc.name == forceGapScenario {
		c.ForceGap = true
		forceGapTiming(&c.Spec)
	}
	if sc.name == zkForcesScenario {
		// A holder not told at once learns of a force at its next renewal
		// (a third of the TTL) or its release, whichever comes first: with a
		// 3 s TTL and 2 s holds, up to a second after the force, where
		// told-at-once's bound is 150 ms here (a pushed loss takes a few ms).
		c.Spec.TTL, c.Spec.Hold, c.Spec.Wait = 3*time.Second, 2*time.Second, 8*time.Second
		c.Duration, c.Told = duration(10*time.Second), 150*time.Millisecond
	}
	if sc.kind == handOff || sc.kind == once {
		c.Duration = duration(4 * time.Second)
	}
	if sc.kind == handOff && sc.backend == "etcd" {
		// Late resumes come after what etcd may keep a detached holding
		// (detachedLife), in a longer run that has room for them.
		c.Spec.LateAfter = detachedLife(c.Spec) + c.Spec.TTL/4
		c.Duration = duration(8 * time.Second)
	}
	switch sc.backend {
	case "valkey":
		bin, err := testserver.ValkeyBinary()
		if err != nil {
			t.Skipf("valkey-server is not installed, the Valkey scenarios do not run: %v", err)
		}
		c.Spec.Backend, c.Server = "redis", bin
	case "redis-sentinel":
		// A failover takes the Sentinels a second or two: a longer run
		// sees one or more.
		c.Spec.Backend, c.Topology, c.Duration = "redis", TopologySentinel, duration(8*time.Second)
	case "redis-cluster":
		c.Spec.Backend, c.Topology, c.Duration = "redis", TopologyCluster, duration(8*time.Second)
	}
}

// TestScenarios is every backend's quick run: a few seeds of a short workload
// under its faults, every checker on the history.
func TestScenarios(t *testing.T) {
	fromRecord := plainTokenFromRecord(t)
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			if longRunOnly[sc.name] && *seedsFlag == 0 && *seedFlag == 0 && *durFlag == 0 {
				t.Skip("a scenario of the long run (-seeds, -seed or -duration)")
			}
			if sc.clockToken && fromRecord {
				t.Skip("the plain lock of this tree draws its token from the released record: TestPlainLockTokensAcrossFailover shows the repeat")
			}
			for _, seed := range seeds(1, 1) {
				spec := quickSpec(sc.kind)
				spec.Backend = sc.backend
				if strings.HasPrefix(sc.backend, "zookeeper") || sc.backend == "postgres" || sc.backend == "mysql" { // the TTL is the session timeout; the SQL stores are slower
					spec.TTL, spec.Hold, spec.Wait = time.Second, 600*time.Millisecond, 3*time.Second
				}
				if sc.backend == "etcd" || strings.HasPrefix(sc.backend, "nats") { // whole seconds
					spec.TTL, spec.Hold, spec.Wait = time.Second, 600*time.Millisecond, 3*time.Second
				}
				if spec.Workload == WorkloadOnce {
					spec.ResultTTL = 2 * spec.TTL
				}
				c := Config{Spec: spec, Workers: 4, Duration: duration(5 * time.Second), Seed: seed,
					Faults: sc.faults, Persist: sc.persist, Replica: sc.replica, Masters: sc.masters, Bound: time.Second, Healed: true}
				sc.configure(t, &c)
				c.Aim = sc.aims()
				r := Run(t, c)
				t.Logf("seed %d: %+v in %v", seed, r.Stats, r.Elapsed.Round(time.Millisecond))
				t.Logf("seed %d: faults that had their effect: %s (aimed at: %v)", seed, r.Stats.BitSummary(), c.Aim)
				record(sc, seed, r)
				r.Report(t, seed)
			}
			sc.requireBites(t)
		})
	}
}
