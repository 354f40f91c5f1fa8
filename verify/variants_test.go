package verify

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// variant is a deliberately broken variant of dlock that the checkers must
// catch, declared once: what it breaks, the backends it applies to, how it
// breaks (a Locker of its own, broken from outside the library: a wrapper
// driver, a modified script, a connection that loses what the server says;
// or the worker's side), and the workloads that expose it
// (TestBrokenVariantsAreCaught runs each on seeds 1 to 8, and each must be
// caught on every one).
type variant struct {
	name     string
	breaks   string
	backends []string // the Spec.Backend values it applies to
	// lock returns the broken Locker of s (nil: the backend's own, broken
	// on the worker's side as worker says).
	lock   func(s Spec) (dlock.Locker, func(), error)
	worker Breakage
	// tags are the build tags the workers are built with: the library
	// compiles its breakage under them alone ("": none).
	tags    string
	exposed []exposure
}

// exposure is a workload that exposes a variant, and the checkers that must
// catch it there.
type exposure struct {
	faults   []string
	replica  bool
	persist  string
	checkers []string
	// setup changes the quick run's plain-lock workload (4 workers, 5 s)
	// for the variant (nil: none).
	setup func(c *Config)
}

// name is the exposure's subtest name: the variant's, with its persistence
// and its failover.
func (e exposure) name(v string) string {
	if e.persist != "" {
		v += "-" + e.persist
	}
	if e.replica {
		v += "-failover"
	}
	return v
}

// variants are the broken variants.
var variants = []variant{
	{name: "rawdel", breaks: "release deletes the lock key without checking the owner",
		backends: []string{"redis"}, lock: brokenLock("rawdel"),
		exposed: []exposure{{faults: []string{FaultStop}, checkers: []string{"exclusion", "told-first", "spurious-loss"},
			setup: func(c *Config) {
				// One key that three workers take in turn, each holding
				// within its TTL: a stop likely hits the holder, whose
				// lease, past its deadline when it resumes, is released
				// (lost on the local side: one release follows) after the
				// key went to another.
				c.Workers, c.Duration = 3, duration(14*time.Second) // a few stops of the holder: one alone missed on seed 1 in CI
				c.Spec.Keys, c.Spec.Hold = []string{"a"}, 300*time.Millisecond
			}}}},
	{name: "mysqlnocheck", breaks: "MariaDB: the release frees the key's row without checking the owner",
		backends: []string{"mysql"}, lock: myNoCheckLock,
		exposed: []exposure{{faults: []string{FaultStop}, checkers: []string{"exclusion", "told-first", "spurious-loss"},
			setup: func(c *Config) {
				// As rawdel: one key that three workers take in turn,
				// each holding within its TTL, so that a stop hits the
				// holder now and then, whose release comes after its lock
				// went to another, frees the new holder's row and wakes
				// the third, waiting, worker. Long enough for a dozen
				// stops: one in two or three hits the holder for long
				// enough (caught 4.4 s into 8 s at the latest over seeds
				// 1 to 8; 8 s with a release that woke nobody missed
				// seed 1 in CI).
				c.Workers, c.Duration = 3, duration(12*time.Second)
				c.Spec.Keys, c.Spec.Hold = []string{"a"}, 300*time.Millisecond
			}}}},
	{name: "repeat", breaks: "every second token is handed out again (the previous one)",
		backends: []string{"redis"}, lock: brokenLock("repeat"),
		exposed: []exposure{{checkers: []string{"fencing"}}}},
	{name: "prefix", breaks: "the plain lock's acquire script of before the token fix, whose next token after a released record is the record's plus one, without the server clock (a failover or crash-restart that lost the last grant hands its token out again)",
		backends: []string{"redis"}, lock: brokenLock("prefix"),
		exposed: []exposure{
			{faults: []string{FaultFailover}, replica: true, checkers: []string{"fencing"}, setup: func(c *Config) {
				// Failovers at the pace of a 1 s TTL: three times as
				// many as the 3 s TTL makes (caught 11.7 s into 12 s at
				// the latest over seeds 1 to 8 at that pace). The
				// crashes keep it: between a snapshot and its crash,
				// more grants.
				prefixWorkload(c)
				c.Pace = time.Second
			}},
			{faults: []string{FaultCrash}, persist: "rdb", checkers: []string{"fencing"}, setup: prefixWorkload},
		}},
	{name: "nodone", breaks: "the holder is never told that its lease ended (no Done, no deadline) and holds past its TTL",
		backends: []string{"redis"}, worker: Breakage{NoDone: true},
		exposed: []exposure{{checkers: []string{"exclusion", "told-first"}}}},
	{name: "nodeadline", breaks: "the lease does not end at its local deadline, whose value stays right: its Done fires only at a release or a loss the store reports (the library built with the tag dlockverify_nodeadline)",
		backends: []string{"redis"}, tags: "dlockverify_nodeadline",
		exposed: []exposure{{checkers: []string{"told-first"},
			setup: func(c *Config) {
				// Fixed leases held past their TTL now and then: each
				// such holder's deadline passes while it holds.
				c.Spec.Hold = 2 * c.Spec.TTL
			}}}},
	{name: "noexpiry", breaks: "the lock is written without expiry, and its renewals (one by one, in batches) and resumptions write none",
		backends: []string{"redis"}, lock: brokenLock("noexpiry"),
		exposed: []exposure{{faults: []string{FaultKill}, checkers: []string{"recovery", "liveness"},
			setup: func(c *Config) { c.Healed = true }}}}, // the recovery checker sees the kills heal
	{name: "renewafter", breaks: "the renewal outlives Unlock (the lock stays held after it)",
		backends: []string{"redis"}, lock: brokenLock("renewafter"),
		exposed: []exposure{{checkers: []string{"liveness", "recovery"},
			setup: func(c *Config) { c.Spec.Wait = 3 * time.Second }}}}, // waiters outlast the hand-over's bound
	{name: "latecleanup", breaks: "Redlock's clean-up of a failed attempt as it was before its fix, releasing each node by owner alone, and held up in the network until the owner's next attempt took the node again",
		backends: []string{"redlock"}, lock: lateCleanupLock,
		exposed: []exposure{{checkers: []string{"exclusion", "fencing", "told-first"},
			setup: func(c *Config) {
				// One key, three masters: attempts that race split them,
				// and a lease often holds no more than the majority,
				// which the late clean-up breaks; holds near the TTL
				// leave another time to take the majority meanwhile.
				c.Spec.Backend, c.Masters, c.Duration = "redlock", 3, duration(10*time.Second)
				c.Spec.Keys, c.Spec.Hold = []string{"a"}, 350*time.Millisecond
			}}}},
	{name: "shortwait", breaks: "a Redlock waiter keeps its place in a master's waiting set only for its own round trip: a release wakes nobody, and the releasing process takes the lock again meanwhile",
		backends: []string{"redlock"}, lock: shortWaitLock,
		exposed: []exposure{{checkers: []string{"fairness"},
			setup: func(c *Config) {
				// Every worker contends for one key, and no holder exits
				// holding: a holder's monopoly ends only when a waiter's
				// retry finds the lock free. Of eight workers, fewer than
				// four sharing the grants evenly is an index below 0.5.
				c.Spec.Backend, c.Masters, c.Workers = "redlock", 5, 8
				c.Spec.Keys, c.Spec.ExitProb = []string{"a"}, 0
			}}}},
	{name: "lostack", breaks: "the resource acknowledges one fenced write in three without storing it (the lock is sound)",
		backends: []string{"redis"}, worker: Breakage{LostAck: true},
		exposed: []exposure{{checkers: []string{"lost-write"}}}},
	{name: "rwshared", breaks: "on the read-write lock with readers, the writers take the read side, which readers and other writers share",
		backends: []string{"redis"}, worker: Breakage{SharedWriters: true},
		exposed: []exposure{{checkers: []string{"exclusion"},
			setup: func(c *Config) {
				q := quickSpec(rwReaders)
				c.Spec.Kind, c.Spec.ReadShare = q.Kind, q.ReadShare
			}}}},
	{name: "nosize", breaks: "on the resized semaphore, the workers ignore the stored size and take permits under the N they were made with",
		backends: []string{"redis"}, lock: noSizeLock,
		exposed: []exposure{{checkers: []string{"exclusion"},
			setup: func(c *Config) { c.Spec.Kind, c.Spec.N, c.Spec.Resize = "sem", quickSpec(semResize).N, true }}}},
	{name: "nodelay", breaks: "the store is never told of the lock-delay: a holding that ends without a release frees the lock at its expiry",
		backends: []string{"redis"}, lock: brokenLock("nodelay"),
		exposed: []exposure{{faults: []string{FaultKill}, checkers: []string{"lock-delay"},
			setup: func(c *Config) {
				c.Spec = quickSpec(delayed)
				c.Spec.Variant, c.Spec.Keys = "nodelay", []string{"a"} // waiters for every holder that dies
			}}}},
	{name: "nopush", breaks: "the driver's grants carry no Lost: a holder whose lock was force-unlocked learns of it at its next renewal, not at once",
		backends: []string{"redis"}, lock: brokenLock("nopush"),
		exposed: []exposure{{faults: []string{FaultForce}, checkers: []string{"told-at-once"}}}},
	{name: "nosubcheck", breaks: "the confirmations of the Client's loss subscription never reach it (its connections drop them), so the check of its holdings when the subscription is established (at first, or again after it dropped) never runs: a force-unlock that came before is left to the holder's next renewal",
		backends: []string{"redis"}, lock: noSubCheckLock,
		// Each force drops the subscriptions as it publishes
		// (Config.ForceGap): only the check when they are set up again
		// tells the holders.
		exposed: []exposure{{faults: []string{FaultForce}, checkers: []string{"told-at-once"},
			setup: func(c *Config) {
				c.ForceGap = true
				forceGapTiming(&c.Spec)
				// Holds near the TTL: a forced holder still holds when
				// told-at-once's bound passes, and its release does not
				// tell it first.
				c.Spec.Hold, c.Duration = 900*time.Millisecond, duration(8*time.Second)
			}}}},
	{name: "natsnopush", breaks: "natslock's grants carry no Lost: a holder whose key was force-unlocked learns of it at its next renewal, not from its watch of the key",
		backends: []string{"nats"}, lock: noPushNATS,
		exposed: []exposure{{faults: []string{FaultForce}, checkers: []string{"told-at-once"},
			setup: func(c *Config) {
				// A holder left to its renewal (a third of the 3 s TTL)
				// still holds, 2 s, when told-at-once's bound (150 ms) has
				// passed: every force of a holding is a violation.
				// One key that four workers contend for: a force finds it
				// held.
				c.Spec.TTL, c.Spec.Hold, c.Spec.Wait = 3*time.Second, 2*time.Second, 8*time.Second
				c.Spec.Keys, c.Told = []string{"a"}, 150*time.Millisecond
				c.Duration = duration(10 * time.Second) // a few forces
			}}}},
	{name: "resumenocheck", breaks: "Resume takes up the holding a reference names without the store's owner check: a holding that expired, or went to another, is resumed all the same",
		backends: []string{"redis"}, lock: brokenLock("resumenocheck"),
		exposed: []exposure{{checkers: []string{"hand-off", "exclusion"},
			setup: func(c *Config) {
				// One key handed over among three workers, nine
				// references in ten resumed after their holding's TTL.
				c.Spec = quickSpec(handOff)
				c.Workers, c.Duration, c.Spec.Keys, c.Spec.Hold = 3, duration(5*time.Second), []string{"a"}, 100*time.Millisecond
				c.Spec.LateResumes = 0.9
			}}}},
	{name: "earlyread", breaks: "a Once caller that finds the key's lock held reads the result before the computation stored it, and takes what it finds (nothing) for the value",
		backends: []string{"redis"}, lock: brokenLock("earlyread"),
		exposed: []exposure{{checkers: []string{"once"},
			setup: func(c *Config) {
				c.Spec = quickSpec(once)
				c.Spec.ResultTTL, c.Duration = 2*c.Spec.TTL, duration(2*time.Second)
			}}}},
}

// prefixWorkload keeps records that outlive the restart or the promotion,
// grants many of them while a failover's replica lags or between a snapshot
// and the crash, and fails over again as soon as the replica is in sync. A
// released record lives out its holding's TTL: with 3 s, the records of the
// snapshot (or the replica) are still there when the restarted server (or
// the promoted replica) serves again, 0.4 to 2.5 s later, a restart on a
// loaded host included; with 1 s many had expired by then. Twice as many
// keys as workers keep most keys idle, their records released: a record
// still held when the state was cut blocks its key until it expires (its
// holder has moved on), and the next token then comes from the clock, where
// a released one gives the repeat.
func prefixWorkload(c *Config) {
	c.Workers, c.Duration, c.Resync = 8, duration(12*time.Second), true
	c.Spec.TTL, c.Spec.Hold = 3*time.Second, 150*time.Millisecond
	c.Spec.Keys = strings.Split("abcdefghijklmnop", "")
}

// variantFor returns the variant of s, which must apply to its backend.
func variantFor(s Spec) (*variant, error) {
	for i := range variants {
		v := &variants[i]
		if v.name != s.Variant {
			continue
		}
		if !slices.Contains(v.backends, s.Backend) {
			return nil, fmt.Errorf("%w: verify: variant %q on %s (it applies to %v)", dlock.ErrInvalid, s.Variant, s.Backend, v.backends)
		}
		return v, nil
	}
	return nil, fmt.Errorf("%w: verify: no variant %q", dlock.ErrInvalid, s.Variant)
}

// oneRedis returns a client of the single Redis server of s, for a variant
// that runs on one (not through Sentinels, not on a Cluster).
func oneRedis(s Spec) (*redis.Client, error) {
	if len(s.Lock) == 0 || s.Topology != "" {
		return nil, fmt.Errorf("%w: verify: variant %q needs one Redis server", dlock.ErrInvalid, s.Variant)
	}
	return redis.NewClient(redisOptions(s.Lock[0])), nil
}

// brokenLock returns the lock function of a variant of the plain Redis lock's
// driver (see broken).
func brokenLock(name string) func(s Spec) (dlock.Locker, func(), error) {
	return func(s Spec) (dlock.Locker, func(), error) {
		rdb, err := oneRedis(s)
		if err != nil {
			return nil, func() {}, err
		}
		lk, err := brokenClient(rdb, name)
		return lk, func() { rdb.Close() }, err
	}
}

// noSizeLock is the lock of the nosize variant.
func noSizeLock(s Spec) (dlock.Locker, func(), error) {
	rdb, err := oneRedis(s)
	if err != nil {
		return nil, func() {}, err
	}
	lk, err := noSizeClient(rdb, s.N)
	return lk, func() { rdb.Close() }, err
}

// lateCleanupLock is the lock of the latecleanup variant.
func lateCleanupLock(s Spec) (dlock.Locker, func(), error) {
	rdbs, closeAll := redisClients(s)
	lk, err := lateCleanupRedlock(rdbs, s.TTL/2)
	return lk, closeAll, err
}

// shortWaitLock is the lock of the shortwait variant.
func shortWaitLock(s Spec) (dlock.Locker, func(), error) {
	rdbs, closeAll := redisClients(s)
	lk, err := shortWaitRedlock(rdbs)
	return lk, closeAll, err
}

// brokenClient returns a Client over the plain Redis lock, broken as variant says.
func brokenClient(rdb *redis.Client, variant string) (*dlock.Client, error) {
	inner, err := redislock.NewDriver(rdb)
	if err != nil {
		return nil, err
	}
	return dlock.NewClient(&broken{Driver: inner, rdb: rdb, variant: variant})
}

// broken is a plain Redis lock Driver with one deliberate defect.
type broken struct {
	*redislock.Driver
	rdb     *redis.Client
	variant string
	mu      sync.Mutex
	n       int
	last    map[string]uint64 // repeat: the last token handed out per key
}

var (
	//go:embed testdata/prefix_lib.lua
	prefixLib string
	//go:embed testdata/prefix_acquire.lua
	prefixAcquire string
	// prefixScript is the plain lock's acquire script as it was before tokens
	// took the server clock into account after a released record.
	prefixScript = redis.NewScript(prefixLib + prefixAcquire)
)

// Acquire takes the plain lock, broken as b.variant says.
func (b *broken) Acquire(ctx context.Context, r driver.AcquireRequest) (driver.Grant, error) {
	if b.variant == "prefix" {
		return b.prefixAcquire(ctx, r)
	}
	if b.variant == "nodelay" {
		r.Delay = 0
	}
	g, err := b.Driver.Acquire(ctx, r)
	if err != nil {
		return g, err
	}
	switch b.variant {
	case "repeat":
		b.mu.Lock()
		b.n++
		if last, ok := b.last[r.Key]; ok && b.n%2 == 0 {
			g.Token = last // the token of an older state, handed out again
		}
		if b.last == nil {
			b.last = map[string]uint64{}
		}
		b.last[r.Key] = g.Token
		b.mu.Unlock()
	case "nopush":
		g.Lost = nil // the store's word that the holding is gone never reaches the lease
	case "noexpiry":
		if err := b.rdb.Persist(ctx, redislock.LockKey(r.Key)).Err(); err != nil {
			return g, fmt.Errorf("%w: %w", dlock.ErrUnavailable, err)
		}
	}
	return g, nil
}

// prefixAcquire runs the pre-fix acquire script, not waiting (no waiting set).
func (b *broken) prefixAcquire(ctx context.Context, r driver.AcquireRequest) (driver.Grant, error) {
	keys := []string{redislock.LockKey(r.Key), redislock.FenceKey(r.Key),
		redislock.LockKey(r.Key) + ":gone:" + r.Owner, redislock.LockKey(r.Key) + ":waiting"}
	res, err := prefixScript.Run(ctx, b.rdb, keys, r.Owner, r.TTL.Milliseconds(), "", "", "0", "0", "", "", "0").Slice()
	if err != nil {
		return driver.Grant{}, fmt.Errorf("%w: %w", dlock.ErrUnavailable, err)
	}
	code, _ := res[0].(int64)
	switch code {
	case 1:
		tok, err := toUint(res[1])
		if err != nil {
			return driver.Grant{}, err
		}
		return driver.Grant{Token: tok, Handle: tok}, nil
	case 0:
		pttl, _ := res[1].(int64)
		return driver.Grant{}, &driver.Taken{Remaining: time.Duration(pttl) * time.Millisecond}
	}
	return driver.Grant{}, fmt.Errorf("%w: verify: acquire reply %v", dlock.ErrRefused, res)
}

func toUint(v any) (uint64, error) {
	switch t := v.(type) {
	case int64:
		return uint64(t), nil
	case string:
		return strconv.ParseUint(t, 10, 64)
	}
	return 0, fmt.Errorf("%w: verify: token %v", dlock.ErrRefused, v)
}

// Extend extends the holding (noexpiry: nothing to extend).
func (b *broken) Extend(ctx context.Context, h driver.Holding, ttl time.Duration) (time.Duration, error) {
	if b.variant == "noexpiry" {
		return ttl, nil // nothing expires: nothing to extend
	}
	return b.Driver.Extend(ctx, h, ttl)
}

// ExtendMany extends each holding as Extend does: the Client's renewer
// extends its holdings in batches (noexpiry: nothing to extend either).
func (b *broken) ExtendMany(ctx context.Context, reqs []driver.ExtendRequest) []driver.ExtendResult {
	if b.variant != "noexpiry" {
		return b.Driver.ExtendMany(ctx, reqs)
	}
	res := make([]driver.ExtendResult, len(reqs))
	for i, r := range reqs {
		res[i].TTL, res[i].Err = b.Extend(ctx, r.Holding, r.TTL)
	}
	return res
}

// Resume takes up a handed-over holding (noexpiry: and takes its expiry off;
// resumenocheck: whatever the store says).
func (b *broken) Resume(ctx context.Context, h driver.Holding, token uint64) (driver.Grant, error) {
	g, err := b.Driver.Resume(ctx, h, token)
	if errors.Is(err, driver.ErrNotHeld) && b.variant == "resumenocheck" {
		return driver.Grant{Token: token, TTL: h.TTL}, nil // the store said no: taken up all the same
	}
	if err == nil && b.variant == "noexpiry" {
		if err := b.rdb.Persist(ctx, redislock.LockKey(h.Key)).Err(); err != nil {
			return g, fmt.Errorf("%w: %w", dlock.ErrUnavailable, err)
		}
	}
	return g, err
}

// GetResult reads key's stored Once result (earlyread: while the key's lock
// is held and nothing is stored yet, an empty value, as if the computation
// had stored it; 'v' is the tag Once stores before a value).
func (b *broken) GetResult(ctx context.Context, key string) ([]byte, bool, error) {
	v, ok, err := b.Driver.GetResult(ctx, key)
	if b.variant != "earlyread" || ok || err != nil {
		return v, ok, err
	}
	n, err := b.rdb.Exists(ctx, redislock.LockKey(key)).Result()
	if err != nil {
		return nil, false, fmt.Errorf("%w: %w", dlock.ErrUnavailable, err)
	}
	if n == 1 {
		return []byte{'v'}, true, nil
	}
	return nil, false, nil
}

// Release releases the holding, broken as b.variant says.
func (b *broken) Release(ctx context.Context, h driver.Holding) error {
	switch b.variant {
	case "rawdel":
		return b.rdb.Del(ctx, redislock.LockKey(h.Key)).Err()
	case "renewafter":
		// Unlock returns at once, and a renewal goes on holding the lock
		// for as long as the process lives.
		go func() {
			for {
				time.Sleep(h.TTL / 3)
				_, _ = b.Driver.Extend(context.Background(), h, h.TTL)
			}
		}()
		return nil
	}
	return b.Driver.Release(ctx, h)
}
