package main

import (
	"flag"
	"regexp"
	"strings"
	"time"
)

// verifyFlags are the flags of dlock verify.
type verifyFlags struct {
	srv      servers
	prefix   string
	duration time.Duration
	ttl      time.Duration
	keys     int
	workers  int
	seed     uint64
	history  string
	faults   string
	worker   bool // hidden: this process is one of the workers
}

func (o *verifyFlags) define() *flag.FlagSet {
	fs := newFlagSet("verify")
	o.srv.define(fs)
	fs.StringVar(&o.prefix, "prefix", "", "the `PREFIX` of every lock name the run uses (required; letters, digits, '.', '-', ':'); the run's names carry a tag of their own after it, and only their entries are removed at the end")
	fs.DurationVar(&o.duration, "duration", 30*time.Second, "how long the workload runs (1s..1h)")
	fs.DurationVar(&o.ttl, "ttl", 2*time.Second, "the locks' TTL (500ms..30s)")
	fs.IntVar(&o.keys, "keys", 2, "how many lock names, PREFIX<TAG>-0 .. PREFIX<TAG>-<N-1> (1..16)")
	fs.IntVar(&o.workers, "workers", 4, "worker processes, each with its own connection (2..32)")
	fs.Uint64Var(&o.seed, "seed", 0, "the seed of the workload and the faults; 0: one is drawn (and printed)")
	fs.StringVar(&o.history, "history", "", "write the history (JSON lines) to `PATH` (default: dlock-verify-PREFIX-SEED.jsonl in the temporary directory)")
	fs.StringVar(&o.faults, "faults", "stop,kill,reset,delay", "the client-side faults to inject, comma-separated, or none")
	fs.BoolVar(&o.worker, "worker", false, "")
	return fs
}

func verifyCommand() command {
	return command{
		name: "verify", summary: "check a lock store's safety with a faulty workload under a prefix of its own",
		synopsis: "dlock verify --prefix PREFIX [--duration 30s] [--keys N] [--history PATH] SERVER FLAGS",
		help: `Runs dlock's verification workload against the lock store given by the server
flags, as it is deployed (a single Redis or a Sentinel set-up's master, a
Cluster through any node, Redlock over several --redis masters, etcd,
ZooKeeper, PostgreSQL): worker processes (this
binary, started again), each with its own connection, take the locks named
PREFIX<TAG>-0.. (TAG drawn for the run, so that no other client's lock under
the prefix is one of them) with TryLock, Lock and Do, hold them for a while, read-modify-write a
protected resource with their fencing tokens and release, some exiting
without releasing. Meanwhile it injects client-side faults only: it pauses
(SIGSTOP/SIGCONT) and kills its own workers, and cuts and delays their
connections through a proxy of its own between them and the store (not for
TLS servers, Redis Cluster or a PostgreSQL key=value string). The store
itself is never disturbed.

The protected resource is a fenced register served by this process (an
in-process Redis the workers write to with redislock's Fence), so nothing but
the locks is written to the store. Every operation is recorded on one clock;
at the end the history is checked, each property printed with PASS or FAIL
(with the first violation and the history around it), the history written
to --history, and the entries of the run's locks removed (also on Ctrl-C):
nothing else under the prefix (another client's lock, a semaphore's size, a
value, a latch) is touched. --prefix is required, and no key outside it is
read or written.

exit status: 0 every property holds; 1 a violation; 64 usage (no --prefix,
or a lock under it is held); 69 the store cannot be reached, or no lock was
granted (nothing was checked); 130 interrupted.

examples:
  dlock verify --prefix verify-test: --redis redis://10.0.0.5:6379/0
  dlock verify --prefix vt- --duration 2m --history vt.jsonl --etcd http://10.0.0.7:2379`,
		flags: func() *flag.FlagSet { return new(verifyFlags).define() },
		run:   runVerify,
	}
}

// prefixPattern is what a --prefix may hold: characters that mean nothing to
// any store's pattern matching or naming (globs, LIKE, paths).
var prefixPattern = regexp.MustCompile(`^[A-Za-z0-9.:-]{1,64}$`)

// check validates the flags of a run (not of a worker).
func (o *verifyFlags) check(rest int) error {
	switch {
	case o.prefix == "":
		return usageErrorf("--prefix is required: the run's locks are named PREFIX<TAG>-0.., and their entries are removed at the end")
	case !prefixPattern.MatchString(o.prefix):
		return usageErrorf("--prefix %q: use 1 to 64 letters, digits, '.', '-' or ':'", o.prefix)
	case rest > 0:
		return usageErrorf("verify takes no arguments")
	case o.duration < time.Second || o.duration > time.Hour:
		return usageErrorf("--duration must be 1s..1h")
	case o.ttl < 500*time.Millisecond || o.ttl > 30*time.Second:
		return usageErrorf("--ttl must be 500ms..30s")
	case o.keys < 1 || o.keys > 16:
		return usageErrorf("--keys must be 1..16")
	case o.workers < 2 || o.workers > 32:
		return usageErrorf("--workers must be 2..32")
	}
	_, err := o.faultList()
	return err
}

// faultList returns the faults of --faults.
func (o *verifyFlags) faultList() ([]string, error) {
	if o.faults == "none" || o.faults == "" {
		return nil, nil
	}
	var out []string
	for _, f := range strings.Split(o.faults, ",") {
		switch f = strings.TrimSpace(f); f {
		case "stop", "kill", "reset", "delay":
			out = append(out, f)
		default:
			return nil, usageErrorf("--faults: unknown fault %q (stop, kill, reset, delay, or none)", f)
		}
	}
	return out, nil
}
