package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/holder"
	"github.com/dlock-go/dlock/redislock"
	"golang.org/x/sys/unix"
)

// Limits of dlock run's flags.
const (
	minRunTTL      = 100 * time.Millisecond // shorter leases cannot be renewed reliably by a process
	defaultGrace   = 5 * time.Second
	maxDescription = 1024
	releaseTimeout = 3 * time.Second // the library adds one more short attempt
	progressEvery  = time.Second

	onLostStop = "stop"
	onLostWarn = "warn"
)

// runFlags are the flags of dlock run.
type runFlags struct {
	servers     servers
	ttl         durationFlag
	lockDelay   durationFlag
	renewEvery  durationFlag
	wait        durationFlag
	failAfter   durationFlag
	grace       durationFlag
	onLost      string
	fair        bool
	slots       int
	shared      bool
	exclusive   bool
	conflict    int
	description string
	quiet       bool
	verbose     bool
	metrics     runMetrics
}

// kind is the kind of lock the flags ask for (see the checks of validate for
// the combinations refused).
func (o *runFlags) kind() lockKind {
	switch {
	case o.shared:
		return readLock
	case o.exclusive:
		return writeLock
	case o.slots != 1:
		return semaphoreLock
	case o.fair:
		return fairLock
	}
	return plainLock
}

func (o *runFlags) define() *flag.FlagSet {
	fs := newFlagSet("run")
	o.servers.define(fs)
	o.ttl = durationFlag{d: dlock.DefaultTTL, min: minRunTTL, max: dlock.MaxTTL, wholeMS: true}
	fs.Var(&o.ttl, "ttl", "lease `DURATION`, renewed while the command runs; a crashed holder keeps the lock this long")
	o.lockDelay = durationFlag{zero: "none", min: time.Millisecond, max: driver.MaxLockDelay, wholeMS: true, def: "none"}
	fs.Var(&o.lockDelay, "lock-delay", "keep KEY from everybody for `DURATION` after this run's holding ends without a release (dlock killed, its host lost, the lock forced or expired); a normal end releases at once. Plain locks only")
	o.renewEvery = durationFlag{min: time.Millisecond, def: "ttl/3"}
	fs.Var(&o.renewEvery, "renew-every", "renew the lease every `DURATION`; must be below half the TTL")
	o.wait = durationFlag{zero: "try once", def: "until obtained or interrupted"}
	fs.Var(&o.wait, "wait", "wait at most `DURATION` for the lock, then exit 75 (-E); 0: a single attempt, no waiting")
	o.failAfter = durationFlag{d: dlock.DefaultFailureLimit, min: time.Millisecond, def: "1m"}
	fs.Var(&o.failAfter, "fail-after", "give up (exit 69) when the server has failed every attempt for `DURATION` (down, out of memory, read-only, loading...); a busy lock is waited for regardless")
	o.grace = durationFlag{d: defaultGrace, zero: "kill at once"}
	fs.Var(&o.grace, "grace", "wait `DURATION` between SIGTERM and SIGKILL when stopping the command's process group (lock lost, processes left behind)")
	fs.StringVar(&o.onLost, "on-lost", onLostStop, "`MODE` when the lock is lost: stop (SIGTERM the command, then SIGKILL; exit 76) or warn (let it run, warn, exit with its status)")
	fs.BoolVar(&o.fair, "fair", false, "first come, first served among waiters")
	fs.IntVar(&o.slots, "n", 1, "take one of `N` permits of a semaphore (1: a plain lock); every run on KEY gives the same N (see dlock semaphore resize)")
	fs.BoolVar(&o.shared, "s", false, "take a shared (read) lock: runs with -s run together, none with -x")
	fs.BoolVar(&o.shared, "shared", false, "same as -s")
	fs.BoolVar(&o.exclusive, "x", false, "take the exclusive (write) lock of a key that -s runs share")
	fs.BoolVar(&o.exclusive, "exclusive", false, "same as -x")
	o.conflict = exitNotObtained
	fs.Var((*exitCodeFlag)(&o.conflict), "E", "exit `CODE` (0..255) when the lock is not obtained within --wait")
	fs.Var((*exitCodeFlag)(&o.conflict), "conflict-exit-code", "same as -E `CODE`")
	fs.StringVar(&o.description, "description", "", "free-form `TEXT` shown by status and list")
	fs.BoolVar(&o.quiet, "q", false, "quiet: say nothing when the lock is busy (with --wait 0 -E 0: skip silently); errors are still printed")
	fs.BoolVar(&o.quiet, "quiet", false, "same as -q")
	fs.BoolVar(&o.verbose, "v", false, "verbose: say on stderr when the lock is obtained (with its token) and released")
	fs.BoolVar(&o.verbose, "verbose", false, "same as -v")
	o.metrics.define(fs)
	return fs
}

func runCommand() command {
	return command{
		name: "run", summary: "run a command while holding a lock (flock across machines)",
		synopsis: "dlock run [flags] KEY -- COMMAND [ARGS...]",
		help: `Takes the lock KEY, runs COMMAND while renewing the lease, and releases the
lock when COMMAND ends. COMMAND gets DLOCK_KEY and DLOCK_TOKEN (the fencing
token, strictly increasing per key) in its environment; its stdin, stdout and
stderr pass through, and dlock prints nothing on stdout. While waiting on a
terminal, dlock shows on stderr how long it has waited and who holds the lock.

The lock is exclusive unless -n N (one of N permits of a semaphore: at most N
runs hold KEY at once) or -s (shared: runs with -s hold KEY together, while no
run with -x does) is given. A key is locked one way: a run that asks for another
kind, or another N, exits 65 ("dlock semaphore resize KEY M" changes the number
of permits to M for every run from then on, started with N or with M).

COMMAND runs in a process group of its own, with everything it starts there
(pipelines, "cmd &"): SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2
sent to dlock are forwarded to the whole group, and losing the lock stops the
whole group. What the command leaves running when it exits is stopped too
(SIGTERM, SIGKILL after --grace) before the lock is released. A process that
leaves the group (setsid, setpgid: daemons) escapes all of this. From a
terminal, the group is given the terminal: COMMAND reads it, and Ctrl-C,
Ctrl-\ and Ctrl-Z reach it directly, once.

exit codes:
  the command's own    it ran (killed by signal N: 128+N)
  75 (see -E)          not obtained within --wait; the command did not start
  76                   the lock was lost while the command ran: it got SIGTERM,
                       then SIGKILL after --grace. With --on-lost warn the
                       command runs on, dlock warns on stderr, and exits with
                       the command's own status
  64                   bad usage
  69                   server unreachable, or failing every attempt for
                       --fail-after (it says why on stderr while it waits)
  65                   the key holds data that is not a dlock lock
  126, 127             the command is not executable, not found (no lock taken)
  128+N                interrupted by signal N while waiting

If dlock itself is killed with SIGKILL, the command gets SIGTERM (Linux; the
processes it started do not) and the lock stays until its TTL runs out.

examples:
  export DLOCK_REDIS=redis://127.0.0.1:6379/0
  dlock run nightly-report -- ./report.sh --full
  dlock run -q --wait 0 -E 0 cron:cleanup -- ./cleanup.sh   # skip quietly if busy
  dlock run -- -odd-key -- ./job.sh                 # a KEY starting with "-"
  dlock run --wait 30s --ttl 1m --description "deploy v42" deploy -- make deploy
  dlock run --redis rediss://:secret@redis.internal:6380/0 job -- sh -c 'echo $DLOCK_TOKEN'`,
		flags:   func() *flag.FlagSet { return new(runFlags).define() },
		run:     runRun,
		signals: true,
	}
}

// runRequest is a parsed and checked dlock run.
type runRequest struct {
	flags *runFlags
	key   string
	path  string   // the command's executable
	argv  []string // the command and its arguments
}

func runRun(ctx context.Context, e *env, args []string) (code int) {
	c := runCommand()
	r, code, ok := parseRun(e, c, args)
	if !ok {
		return code
	}
	defer func() { r.flags.metrics.write(e, r.key, code) }()
	// Register before connecting, so that no signal is lost from here on.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)

	st, err := r.flags.servers.open(ctx, e)
	if err != nil {
		return fail(e, c.name, err)
	}
	defer st.close()
	locker, err := st.locker(r.flags.kind(), r.flags.slots, append(r.lockOptions(), r.flags.metrics.options()...)...)
	if err != nil {
		return fail(e, c.name, err)
	}
	lease, code, ok := r.acquire(ctx, e, st, locker, sigs)
	if !ok {
		return code
	}
	return r.supervise(e, lease, sigs)
}

// parseRun parses "[flags] KEY [flags] -- COMMAND [ARGS...]" and checks
// everything that needs no server.
func parseRun(e *env, c command, args []string) (*runRequest, int, bool) {
	o := new(runFlags)
	fs := o.define()
	a, err := splitArgs(fs, args)
	switch {
	case err != nil && (len(a.before) < 2 || slices.Contains(args, "--")):
		return nil, flagError(e, c, fs, err), false
	case err != nil:
		// "dlock run KEY ls -l": a flag of the command, with no "--" before it.
		err = usageErrorf("missing \"--\" between KEY and COMMAND: dlock run [flags] %s -- %s ...", a.before[0], strings.Join(a.before[1:], " "))
	case len(a.before) == 0 && a.dashdash && len(a.after) >= 2 && a.after[1] == "--":
		// "dlock run [flags] -- -KEY -- COMMAND": a key that starts with "-".
		a.before, a.after = a.after[:1], a.after[2:]
		if len(a.after) == 0 {
			err = usageErrorf("missing COMMAND after \"--\"")
		}
	case len(a.before) == 0 && a.dashdash:
		err = usageErrorf("missing KEY before \"--\": dlock run [flags] KEY -- COMMAND [ARGS...]")
	case len(a.before) == 0:
		err = usageErrorf("missing KEY and command: dlock run [flags] KEY -- COMMAND [ARGS...]")
	case len(a.before) > 1:
		err = usageErrorf("missing \"--\" between KEY and COMMAND: dlock run [flags] %s -- %s", a.before[0], strings.Join(a.before[1:], " "))
	case !a.dashdash:
		err = usageErrorf("missing \"--\" and COMMAND after KEY %q", a.before[0])
	case len(a.after) == 0:
		err = usageErrorf("missing COMMAND after \"--\"")
	}
	if err != nil {
		return nil, fail(e, c.name, err), false
	}
	r := &runRequest{flags: o, key: a.before[0], argv: a.after}
	if err := r.check(); err != nil {
		return nil, fail(e, c.name, err), false
	}
	path, err := exec.LookPath(r.argv[0])
	if errors.Is(err, exec.ErrDot) {
		err = nil // found through "." in $PATH: a shell would run it too
	}
	if err != nil {
		return nil, commandError(e, r.argv[0], err), false
	}
	r.path = path
	return r, 0, true
}

// check validates what the flags and the key say, before any I/O.
func (r *runRequest) check() error {
	o := r.flags
	if err := driver.ValidateKey(r.key); err != nil {
		return err
	}
	if o.renewEvery.set && o.renewEvery.d >= o.ttl.d/2 {
		return usageErrorf("--renew-every %v must be below half the --ttl %v", o.renewEvery.d, o.ttl.d)
	}
	if o.onLost != onLostStop && o.onLost != onLostWarn {
		return usageErrorf("--on-lost %q: stop or warn", o.onLost)
	}
	switch {
	case o.slots < 1 || o.slots > redislock.MaxPermits:
		return usageErrorf("-n %d: a semaphore has 1 to %d permits", o.slots, redislock.MaxPermits)
	case o.shared && o.exclusive:
		return usageErrorf("-s and -x: a lock is either shared or exclusive")
	case (o.shared || o.exclusive) && o.slots != 1:
		return usageErrorf("-n with -s or -x: a key is either a semaphore or a read-write lock")
	case o.quiet && o.verbose:
		return usageErrorf("-q and -v: quiet or verbose, not both")
	case (o.shared || o.exclusive || o.slots != 1) && o.fair:
		return usageErrorf("--fair with -n, -s or -x: semaphores are first come, first served already, read-write locks are not")
	case o.lockDelay.d > 0 && (o.shared || o.exclusive || o.slots != 1 || o.fair):
		return usageErrorf("--lock-delay with --fair, -n, -s or -x: only a plain lock keeps a lock-delay")
	}
	if len(o.description) > maxDescription {
		return usageErrorf("--description of %d bytes exceeds %d", len(o.description), maxDescription)
	}
	return nil
}

// commandError reports a command that cannot be run, with the shell's codes.
func commandError(e *env, name string, err error) int {
	code, why := exitNotExec, "not executable"
	switch {
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist):
		code, why = exitNotFound, "command not found"
	case errors.Is(err, syscall.EISDIR):
		why = "is a directory"
	case errors.Is(err, fs.ErrPermission):
		why = "permission denied"
	}
	fmt.Fprintf(e.stderr, "dlock run: %s: %s\n", name, why)
	return code
}

// lockOptions are the lease options of this run, with the holder's metadata.
func (r *runRequest) lockOptions() []dlock.Option {
	o := r.flags
	opts := []dlock.Option{dlock.WithTTL(o.ttl.d), dlock.WithAutoRenew(true), dlock.WithMetadata(holderRecord(o.description).Encode()), dlock.WithFailureLimit(o.failAfter.d)}
	if o.renewEvery.set {
		opts = append(opts, dlock.WithRenewEvery(o.renewEvery.d))
	}
	if o.lockDelay.d > 0 {
		opts = append(opts, dlock.WithLockDelay(o.lockDelay.d))
	}
	return opts
}

// holderRecord is the holder record of this process (host, pid, user, now),
// with description, which status and list show.
func holderRecord(description string) holder.Record {
	m := holder.Record{PID: os.Getpid(), Since: time.Now().UTC(), Description: description}
	m.Host, _ = os.Hostname()
	if u, err := user.Current(); err == nil {
		m.User = u.Username
	}
	return m
}

// acquire takes the lock: one attempt, then (unless --wait 0) waiting until it
// is obtained, --wait has passed, or a signal arrives.
func (r *runRequest) acquire(ctx context.Context, e *env, st store, locker dlock.Locker, sigs <-chan os.Signal) (*dlock.Lease, int, bool) {
	start := time.Now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu  sync.Mutex
		got os.Signal
		wg  sync.WaitGroup
	)
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case s := <-sigs:
				if !interrupts(s) {
					continue // no command yet to pass it to
				}
				mu.Lock()
				got = s
				mu.Unlock()
				cancel()
			case <-stop:
			}
			return
		}
	}()
	lease, err := locker.TryLock(ctx, r.key)
	// Held, or a failure that waiting may cure (the server is down, loading, out
	// of memory...): wait, as Lock retries those within its wait.
	waitable := errors.Is(err, dlock.ErrNotObtained) || (errors.Is(err, dlock.ErrUnavailable) && !errors.Is(err, dlock.ErrRefused))
	if waitable && ctx.Err() == nil && (!r.flags.wait.set || r.flags.wait.d > 0) {
		wctx := ctx
		if r.flags.wait.set {
			var wcancel context.CancelFunc
			wctx, wcancel = context.WithDeadline(ctx, start.Add(r.flags.wait.d))
			defer wcancel()
		}
		p := startProgress(wctx, e, st, r.key, start, !r.flags.quiet)
		lease, err = locker.Lock(wctx, r.key)
		p.stop()
	}
	close(stop)
	wg.Wait()
	mu.Lock()
	sig := got
	mu.Unlock()
	if s, ok := sig.(syscall.Signal); ok {
		if err == nil { // obtained as the signal came: the command must not start
			release(e, lease)
		}
		fmt.Fprintf(e.stderr, "dlock run: interrupted by %s while waiting for %q\n", signalName(s), r.key)
		return nil, 128 + int(s), false
	}
	if err == nil {
		if r.flags.verbose {
			fmt.Fprintf(e.stderr, "dlock run: obtained %q on %s (token %d) after %v\n", r.key, st, lease.Token(), time.Since(start).Round(time.Millisecond))
		}
		return lease, 0, true
	}
	if errors.Is(err, dlock.ErrNotObtained) && !errors.Is(err, dlock.ErrUnavailable) {
		if !r.flags.quiet {
			fmt.Fprintf(e.stderr, "dlock run: %s\n", r.notObtained(st, time.Since(start)))
		}
		return nil, r.flags.conflict, false
	}
	if errors.Is(err, dlock.ErrConflict) {
		return nil, fail(e, "run", st.explain(ctx, r.key, err)), false
	}
	return nil, fail(e, "run", fmt.Errorf("locking %q on %s: %w", r.key, st, err)), false
}

// notObtained says why the lock was not obtained, naming its holder.
func (r *runRequest) notObtained(st store, waited time.Duration) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	state := "is held by another process"
	if li, err := inspectLock(ctx, st, r.key); err == nil && li.Held {
		state = "is held by " + li.holderLine(time.Now())
	} else if err == nil {
		if d := li.delayLine(); d != "" {
			state = d
		}
	}
	if !r.flags.wait.set || r.flags.wait.d == 0 {
		return fmt.Sprintf("%q %s (not waiting: --wait 0)", r.key, state)
	}
	return fmt.Sprintf("%q %s; gave up after %v (--wait %v)", r.key, state, waited.Round(time.Millisecond), r.flags.wait.d)
}

// supervise runs the command under lease and returns dlock's exit code.
func (r *runRequest) supervise(e *env, lease *dlock.Lease, sigs <-chan os.Signal) int {
	cmd := &exec.Cmd{
		Path:   r.path,
		Args:   r.argv,
		Env:    append(os.Environ(), "DLOCK_KEY="+r.key, "DLOCK_TOKEN="+strconv.FormatUint(lease.Token(), 10)),
		Stdin:  e.stdin,
		Stdout: e.stdout,
		Stderr: e.stderr,
	}
	j, err := startJob(cmd)
	if err != nil {
		release(e, lease)
		return commandError(e, r.argv[0], err)
	}
	lost := lease.Done()
	var kill <-chan time.Time
	wasLost := false
	var status syscall.WaitStatus
wait:
	for {
		select {
		case s := <-sigs:
			if s, ok := s.(syscall.Signal); ok {
				j.signal(s)
			}
		case <-lost:
			lost, wasLost = nil, true
			if r.flags.onLost == onLostWarn {
				fmt.Fprintf(e.stderr, "dlock run: lost the lock on %q: %s; the command keeps running (--on-lost warn)\n", r.key, lossReason(lease.Err()))
				continue
			}
			fmt.Fprintf(e.stderr, "dlock run: lost the lock on %q: %s; stopping the command\n", r.key, lossReason(lease.Err()))
			j.terminate()
			t := time.NewTimer(r.flags.grace.d)
			defer t.Stop()
			kill = t.C
		case <-kill:
			kill = nil
			j.signal(syscall.SIGKILL)
		case status = <-j.events:
			if status.Stopped() {
				j.suspend()
				continue
			}
			break wait
		}
	}
	j.closeTerminal()
	code := waitCode(status)
	if j.drain(r.flags.grace.d) {
		fmt.Fprintf(e.stderr, "dlock run: the command left processes running in its process group: stopped them\n")
	}
	// When the lock was lost there is nothing to release, and the connection
	// may be dead: the lease has stopped renewing, and a holding the server
	// may still have expires.
	if !wasLost {
		rerr := release(e, lease)
		wasLost = errors.Is(rerr, dlock.ErrNotHeld)
		if rerr == nil && r.flags.verbose {
			fmt.Fprintf(e.stderr, "dlock run: released %q (the command exited %d)\n", r.key, code)
		}
		if wasLost && r.flags.onLost == onLostStop {
			fmt.Fprintf(e.stderr, "dlock run: lost the lock on %q before the command ended (it exited %d)\n", r.key, code)
		}
	}
	switch {
	case !wasLost:
		return code
	case r.flags.onLost == onLostWarn:
		fmt.Fprintf(e.stderr, "dlock run: warning: the command ran partly without the lock on %q (--on-lost warn); it exited %d\n", r.key, code)
		return code
	}
	return exitLockLost
}

// forwarded are the signals dlock run passes on to its command.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// interrupts reports whether s, arriving while dlock run waits for its lock,
// ends the wait.
func interrupts(s os.Signal) bool {
	return s == syscall.SIGINT || s == syscall.SIGTERM || s == syscall.SIGHUP || s == syscall.SIGQUIT
}

// signalName names s as the shell does ("SIGINT").
func signalName(s syscall.Signal) string {
	if n := unix.SignalName(s); n != "" {
		return n
	}
	return s.String()
}

// childCode is the shell's view of how a process ended.
func childCode(ps *os.ProcessState) int {
	if ps == nil {
		return exitFailure
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok {
		return waitCode(ws)
	}
	return exitFailure
}

// waitCode is the shell's view of a wait status: the exit code, or 128+N
// after signal N.
func waitCode(ws syscall.WaitStatus) int {
	switch {
	case ws.Signaled():
		return 128 + int(ws.Signal())
	case ws.Exited():
		return ws.ExitStatus()
	}
	return exitFailure
}

// release unlocks after the command ended, on a fresh bounded context. An
// error other than ErrNotHeld is reported here: the lock then stays until its
// TTL runs out.
func release(e *env, lease *dlock.Lease) error {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	err := lease.Unlock(ctx)
	if err != nil && !errors.Is(err, dlock.ErrNotHeld) {
		fmt.Fprintf(e.stderr, "dlock run: releasing %q: %s (it expires in at most %v)\n", lease.Key(), oneLine(err), time.Until(lease.Deadline()).Round(time.Millisecond))
	}
	return err
}

// lossReason is why a lease was lost, on one line, without the "lock lost"
// that the message around it says already.
func lossReason(err error) string {
	msg := oneLine(err)
	for _, p := range []string{"dlock: ", "lock lost: "} {
		msg = strings.TrimPrefix(msg, p)
	}
	return msg
}
