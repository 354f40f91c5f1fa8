package verify

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// Spec is what a worker process does: the backend and primitive it locks with,
// the keys, the resource it writes, and the timing of its loop.
type Spec struct {
	Backend  string   // the lock store: redis, redlock, legacy, etcd, zookeeper, postgres, memlock
	Kind     string   // plain, fair, reentrant, rw, sem
	N        int      // the semaphore's permits
	Variant  string   // a deliberately broken variant ("" for none; the suite's tests declare them)
	Lock     []string // the lock store's addresses (Redlock: every master)
	Resource string   // the protected resource's redis-server
	Keys     []string
	Topology string // the Redis lock store's shape: "", TopologySentinel, TopologyCluster
	TTL      time.Duration
	Hold     time.Duration // the longest hold
	Wait     time.Duration // a waiting Lock's WithWait
	ExitProb float64       // the chance that a holder exits without releasing
	Seed     uint64
	Dir      string // the history's directory
	Proc     int    // this worker's number
	Life     int    // how many times the worker was started before

	// ReadShare is, on the read-write lock (Kind rw), the chance that a
	// round takes the read side: its holder reads the resource and writes
	// nothing (0: writers alone).
	ReadShare float64

	// Resize: on the semaphore (Kind sem), the test process changes the
	// size of the keys during the run (see OpResize); the workers keep N,
	// their initial size.
	Resize bool
	// LockDelay is the lock-delay of every acquisition (dlock.WithLockDelay;
	// 0: none).
	LockDelay time.Duration
	// Workload is what the workers do ("": take, hold, write, release;
	// WorkloadHandOff: and hand holdings over; WorkloadOnce: call
	// dlock.Once), on the plain lock's Client.
	Workload string
	// ResultTTL is WorkloadOnce's Once.ResultTTL.
	ResultTTL time.Duration
	// LateResumes is WorkloadHandOff's share of the resumes made after the
	// holding's TTL, which the store must refuse (0: a half).
	LateResumes float64
	// LateAfter is how long after its Detach a late resume comes at the
	// earliest, up to half a TTL more (0: two TTLs): beyond what the store
	// may keep a detached holding (Params.Detached).
	LateAfter time.Duration

	// shared is, for a backend whose workers are goroutines of the test
	// process, what they share (memlock: its store); nil: processes.
	shared any
}

// redisOptions are the client options of workers: short timeouts, so that a
// fault shows as an error rather than a long stall.
func redisOptions(addr string) *redis.Options {
	return &redis.Options{
		Addr: addr, DialTimeout: 300 * time.Millisecond,
		ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond,
		MaxRetries: -1, PoolSize: 8, Protocol: 2,
	}
}

// sentinelMaster is the name the test Sentinels monitor their primary under.
const sentinelMaster = "dlockmaster"

// failoverOptions are redisOptions for a client that follows the primary
// through the Sentinels at addrs.
func failoverOptions(addrs []string) *redis.FailoverOptions {
	o := redisOptions("")
	return &redis.FailoverOptions{
		MasterName: sentinelMaster, SentinelAddrs: addrs, DialTimeout: o.DialTimeout,
		ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout,
		MaxRetries: o.MaxRetries, PoolSize: o.PoolSize, Protocol: o.Protocol,
	}
}

// clusterOptions are redisOptions for a Redis Cluster client seeded with
// addrs; it follows a moved slot (MOVED) as its own.
func clusterOptions(addrs []string) *redis.ClusterOptions {
	o := redisOptions("")
	return &redis.ClusterOptions{
		Addrs: addrs, DialTimeout: o.DialTimeout,
		ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout,
		MaxRetries: o.MaxRetries, PoolSize: o.PoolSize, Protocol: o.Protocol,
	}
}

// worker is one worker process's state.
type worker struct {
	s     Spec
	b     Breakage
	rng   *rand.Rand
	rec   *Recorder
	lk    dlock.Locker
	rlk   dlock.Locker // the read side of a read-write lock (nil: none)
	res   *redis.Client
	fence *redislock.Fence

	current *dlock.Lease // the lease of the Do in progress

	client   *dlock.Client // the Locker as a Client: Spec.Workload's Resume and Once
	seq      int64         // the Once workload's computations so far
	detached bool          // the hand-off workload's last round detached its lease
}

// runWorker runs the worker loop of s with lk until ctx ends: acquire, hold,
// read-modify-write the resource with the token, release (or exit without
// releasing), broken on the worker's side as b says. Every worker runs it:
// the tests' (their Locker made by the backend's entry) and an operator's
// (RunWorkerLocker).
func runWorker(ctx context.Context, s Spec, lk dlock.Locker, b Breakage) error {
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
	w := &worker{s: s, b: b, rng: rand.New(rand.NewPCG(s.Seed, uint64(s.Proc)<<32|uint64(s.Life))), rec: rec, lk: lk, res: res, fence: fence}
	if rw, ok := lk.(*redislock.RWMutex); ok && s.ReadShare > 0 {
		w.rlk = rw.RLocker()
	}
	round := w.round
	if s.Workload != "" {
		c, ok := lk.(*dlock.Client)
		if !ok {
			return fmt.Errorf("%w: verify: workload %q on a %T, not a *dlock.Client", dlock.ErrInvalid, s.Workload, lk)
		}
		switch w.client = c; s.Workload {
		case WorkloadHandOff:
			round = w.handOffRound
		case WorkloadOnce:
			round = w.onceRound
		default:
			return fmt.Errorf("%w: verify: workload %q", dlock.ErrInvalid, s.Workload)
		}
	}
	rec.Record(Event{Op: OpStart})
	sctx, stop := context.WithCancel(ctx)
	stalled := make(chan struct{})
	go func() { defer close(stalled); watchStalls(sctx, rec, s.Proc) }()
	for ctx.Err() == nil {
		round(ctx)
	}
	stop()
	<-stalled
	return nil
}

// Stall detection: a worker's own goroutine ticks every stallTick; a gap
// between two ticks longer than stallMin is a time the process did not run
// (its host too loaded to schedule it, or its timers late), recorded as a
// FaultStall of that worker.
const (
	stallTick = 20 * time.Millisecond
	stallMin  = 50 * time.Millisecond
)

// watchStalls records, until ctx ends, each time worker proc's process was
// not scheduled for stallMin or more, as a FaultStall from the last tick it
// ran to the first it ran again: the checkers take it as a pause of that
// worker, as they do a SIGSTOP's (a Done seen late, a wait that timed out),
// and as nothing else (it excuses no overlap of holdings).
func watchStalls(ctx context.Context, rec *Recorder, proc int) {
	watchStallsSince(ctx, rec, proc, Now())
}

// watchStallsSince is watchStalls counting from last, a time the process
// ran.
func watchStallsSince(ctx context.Context, rec *Recorder, proc int, last int64) {
	tick := time.NewTicker(stallTick)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := Now()
		if gap := time.Duration(now - last); gap >= stallMin {
			rec.Record(Event{T: last, Op: OpNemesis, Type: Invoke, Fault: FaultStall, Target: proc})
			rec.Record(Event{T: now, Op: OpNemesis, Type: OK, Fault: FaultStall, Target: proc, Delay: gap})
		}
		last = now
	}
}

// Breakage is what a broken variant breaks on the worker's side (its lease's
// watch, the resource), the lock being sound; the zero value breaks nothing.
type Breakage struct {
	// NoDone: the holder ignores its lease (no Done watched, no deadline,
	// no renewal) and holds past its TTL.
	NoDone bool
	// LostAck: the resource acknowledges one fenced write in three without
	// storing it.
	LostAck bool
	// SharedWriters: on the read-write lock with readers, the writers take
	// the read side.
	SharedWriters bool
}

// round is one acquisition and what follows it.
func (w *worker) round(ctx context.Context) {
	key := w.s.Keys[w.rng.IntN(len(w.s.Keys))]
	mode := []string{"try", "wait", "wait", "do"}[w.rng.IntN(4)]
	lk, read := w.lk, false
	if w.rlk != nil && w.rng.Float64() < w.s.ReadShare { // drawn only where there is a read side
		lk, read = w.rlk, true
	} else if w.rlk != nil && w.b.SharedWriters {
		lk = w.rlk // the variant's writers share the lock with every holder
	}
	opts := []dlock.Option{dlock.WithTTL(w.s.TTL)}
	if w.s.LockDelay > 0 {
		opts = append(opts, dlock.WithLockDelay(w.s.LockDelay))
	}
	if w.b.NoDone {
		opts = append(opts, dlock.WithAutoRenew(false))
	}
	id := w.rec.NextID()
	w.rec.Record(Event{Op: OpAcquire, Type: Invoke, ID: id, Key: key, Mode: mode, Read: read})
	actx := context.WithoutCancel(ctx) // a stop signal does not cut an operation short
	rl := &recordingLocker{w: w, lk: lk, id: id, mode: mode, read: read}
	switch mode {
	case "try":
		l, err := lk.TryLock(actx, key, opts...)
		rl.acquired(key, l, err)
		if err == nil {
			w.hold(ctx, l, read)
			w.release(l, key)
		} else {
			w.pause(ctx, w.s.TTL/4)
		}
	case "wait":
		l, err := rl.Lock(actx, key, append(opts, dlock.WithWait(w.s.Wait))...)
		if err == nil {
			w.hold(ctx, l, read)
			w.release(l, key)
		}
	case "do":
		var rid int64
		err := dlock.Do(actx, rl, key, func(context.Context) error {
			// Do hands the function its lease's context only; the lease is
			// the one recordingLocker saw.
			l := w.current
			w.hold(ctx, l, read)
			rid = w.rec.NextID()
			w.rec.Record(Event{Op: OpRelease, Type: Invoke, ID: rid, Key: key, Token: l.Token(), Deadline: w.deadline(l)})
			return nil
		}, append(opts, dlock.WithWait(w.s.Wait))...)
		if rid != 0 {
			w.rec.Record(Event{Op: OpRelease, Type: outcome(err), ID: rid, Key: key, Err: errText(err)})
		}
	}
}

// recordingLocker is the Locker that a worker's round takes its lock with (Do
// calls it): it records the acquisition.
type recordingLocker struct {
	w    *worker
	lk   dlock.Locker // the write side, or the read side (read)
	id   int64
	mode string
	read bool
}

// TryLock is Lock: Do only calls Lock.
func (r *recordingLocker) TryLock(ctx context.Context, key string, opts ...dlock.Option) (*dlock.Lease, error) {
	return r.Lock(ctx, key, opts...)
}

// Lock takes the lock with the worker's Locker and records the outcome.
func (r *recordingLocker) Lock(ctx context.Context, key string, opts ...dlock.Option) (*dlock.Lease, error) {
	l, err := r.lk.Lock(ctx, key, opts...)
	r.acquired(key, l, err)
	r.w.current = l
	return l, err
}

// acquired records the outcome of the acquisition and watches a lease it got.
func (r *recordingLocker) acquired(key string, l *dlock.Lease, err error) {
	r.w.acquired(Event{Op: OpAcquire, ID: r.id, Key: key, Mode: r.mode, Read: r.read}, l, err)
}

// deadline is the lease's local deadline on Now's clock (0 for a variant that
// ignores it).
func (w *worker) deadline(l *dlock.Lease) int64 {
	if w.b.NoDone {
		return 0
	}
	return Now() + int64(time.Until(l.Deadline()))
}

// acquired records the outcome e (an acquisition's completion, without its
// type) and watches a lease it got.
func (w *worker) acquired(e Event, l *dlock.Lease, err error) {
	if err != nil {
		e.Type = Fail
		if !errors.Is(err, dlock.ErrNotObtained) {
			e.Type = Info // the Client abandoned what it may have taken; nobody holds it
		}
		e.Err = errText(err)
		w.rec.Record(e)
		return
	}
	e.Type, e.Token, e.Owner, e.Deadline = OK, l.Token(), l.Owner(), w.deadline(l)
	w.rec.Record(e)
	if w.b.NoDone {
		return // the variant never learns that its lease ended
	}
	go w.watch(l, e.Key)
}

// watch records the lease's renewals (its deadline moving) and the moment its
// Done fires.
func (w *worker) watch(l *dlock.Lease, key string) {
	last := l.Deadline()
	tick := time.NewTicker(w.s.TTL / 8)
	defer tick.Stop()
	for {
		select {
		case <-l.Done():
			w.rec.Record(Event{Op: OpDone, Key: key, Token: l.Token(), Err: errText(context.Cause(l.Context()))})
			return
		case <-tick.C:
			if d := l.Deadline(); !d.Equal(last) {
				last = d
				w.rec.Record(Event{Op: OpExtend, Key: key, Token: l.Token(), Deadline: w.deadline(l)})
			}
		}
	}
}

// pause sleeps for up to d (a random part of it), or until ctx ends.
func (w *worker) pause(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(time.Duration(w.rng.Int64N(int64(d))))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// hold holds the lease for a random time, read-modify-writes the resource with
// its token (a reader only reads it), and, now and then, exits without
// releasing.
func (w *worker) hold(ctx context.Context, l *dlock.Lease, read bool) {
	hold := w.s.Hold
	if w.b.NoDone {
		hold = 2 * w.s.TTL // it holds past its TTL, unaware
	}
	w.pause(ctx, hold)
	wctx := l.Context()
	if w.b.NoDone {
		wctx = context.Background()
	}
	switch {
	case read: // readers are concurrent: they read under their lease
		w.read(wctx, l)
	case w.s.Kind != "sem": // semaphore holders are concurrent: they write nothing
		w.modify(wctx, l)
	}
	if w.s.shared == nil && w.rng.Float64() < w.s.ExitProb {
		w.rec.Record(Event{Op: "exit", Key: l.Key(), Token: l.Token()})
		os.Exit(0)
	}
}

// resourceKey is the resource a lock key protects.
func resourceKey(key string) string { return "res:" + key }

// readResource reads the resource of key and records the read, under the
// lease's token (0: the harness's read, under no lease) with rec; it reports
// the value and whether the read completed.
func readResource(ctx context.Context, rec *Recorder, res *redis.Client, key string, token uint64) (int64, bool) {
	id := rec.NextID()
	rec.Record(Event{Op: OpRead, Type: Invoke, ID: id, Key: key, Token: token})
	s, err := res.Get(ctx, resourceKey(key)).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		rec.Record(Event{Op: OpRead, Type: Info, ID: id, Key: key, Err: errText(err)})
		return 0, false
	}
	v, _ := strconv.ParseInt(s, 10, 64)
	rec.Record(Event{Op: OpRead, Type: OK, ID: id, Key: key, Value: v})
	return v, true
}

// read reads the resource under a read lease.
func (w *worker) read(ctx context.Context, l *dlock.Lease) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	readResource(ctx, w.rec, w.res, l.Key(), l.Token())
}

// modify reads the resource's counter and writes it one higher, fenced by the
// lease's token.
func (w *worker) modify(ctx context.Context, l *dlock.Lease) {
	rk := resourceKey(l.Key())
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	v, ok := readResource(ctx, w.rec, w.res, l.Key(), l.Token())
	if !ok {
		return
	}
	id := w.rec.NextID()
	w.rec.Record(Event{Op: OpWrite, Type: Invoke, ID: id, Key: l.Key(), Token: l.Token(), Value: v + 1})
	// The lostack variant's resource acknowledges one write in three and
	// does not store it.
	var err error
	if lost := w.b.LostAck && w.rng.IntN(3) == 0; !lost {
		err = w.fence.Set(ctx, fenceToken{l.Key(), l.Token()}, rk, strconv.FormatInt(v+1, 10), 0)
	}
	typ := OK
	switch {
	case errors.Is(err, dlock.ErrStaleToken):
		typ = Fail
	case err != nil:
		typ = Info
	}
	w.rec.Record(Event{Op: OpWrite, Type: typ, ID: id, Key: l.Key(), Token: l.Token(), Value: v + 1, Err: errText(err)})
}

// fenceToken is the lock key and token a fenced write carries.
type fenceToken struct {
	key   string
	token uint64
}

// Key is the lock key.
func (f fenceToken) Key() string { return f.key }

// Token is the fencing token.
func (f fenceToken) Token() uint64 { return f.token }

// release unlocks l and records the release.
func (w *worker) release(l *dlock.Lease, key string) {
	id := w.rec.NextID()
	w.rec.Record(Event{Op: OpRelease, Type: Invoke, ID: id, Key: key, Token: l.Token(), Deadline: w.deadline(l)})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := l.Unlock(ctx)
	w.rec.Record(Event{Op: OpRelease, Type: outcome(err), ID: id, Key: key, Token: l.Token(), Err: errText(err)})
}

// outcome is the event type of an operation's error.
func outcome(err error) string {
	switch {
	case err == nil:
		return OK
	case errors.Is(err, dlock.ErrNotHeld):
		return Fail
	}
	return Info
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	s := err.Error()
	if len(s) > 160 {
		s = s[:160]
	}
	return s
}
