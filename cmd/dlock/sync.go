package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"syscall"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redislock"
)

// syncStore returns the latch and barrier driver of st, or a usage error on a
// backend without them.
func syncStore(st store) (driver.SyncDriver, error) {
	switch s := st.(type) {
	case *redisStore:
		return redislock.NewSyncDriver(s.rdb)
	case *mutexStore:
		if s.sync != nil {
			return s.sync, nil
		}
	case pgStore:
		return s.sync, nil
	case mysqlStore:
		return s.sync, nil
	}
	return nil, usageErrorf("latches and barriers need --redis (one server or a Cluster), --etcd, --postgres or --mysql, not %s", st)
}

// syncFlags are the flags of latch and barrier.
type syncFlags struct {
	servers servers
	n       int
	ttl     time.Duration
	timeout time.Duration
}

func (o *syncFlags) define(name string) *flag.FlagSet {
	fs := newFlagSet(name)
	o.servers.define(fs)
	fs.DurationVar(&o.timeout, "timeout", 0, "give up waiting after `D` (exit 75); 0 waits for as long as it takes")
	if name == "latch" {
		fs.IntVar(&o.n, "count", 0, "the count `N` the latch starts from (required; every user of the latch gives the same)")
		fs.DurationVar(&o.ttl, "ttl", 24*time.Hour, "forget the latch `D` after its last use")
	} else {
		fs.IntVar(&o.n, "parties", 0, "the number `N` of parties the barrier waits for (required)")
		fs.DurationVar(&o.ttl, "ttl", dlock.DefaultTTL, "a party that stops renewing its presence (it died) stops counting after `D`")
	}
	return fs
}

func latchCommand() command {
	return command{
		name: "latch", summary: "count down a latch shared by processes, or wait for it to reach zero",
		synopsis: "dlock latch count-down|wait|count --count N [flags] NAME",
		help: `A latch starts at --count N. "count-down" lowers it by one (never below zero:
counting down an open latch does nothing) and prints the count left; "wait"
returns once it is zero (exit 75 after --timeout); "count" prints it. Every
process gives the same N (another N is exit 65). A latch nobody uses for --ttl
is forgotten. On Redis, etcd and PostgreSQL.

examples:
  dlock latch wait --count 3 --timeout 10m build-done && ./deploy
  ./build-shard 1 && dlock latch count-down --count 3 build-done`,
		flags: func() *flag.FlagSet { return new(syncFlags).define("latch") },
		run:   runLatch,
	}
}

func barrierCommand() command {
	return command{
		name: "barrier", summary: "wait for N parties, run a command, and wait for all to finish",
		synopsis: "dlock barrier --parties N [flags] NAME [-- COMMAND [ARGS...]]",
		help: `Enters the double barrier NAME and waits until --parties N processes have
entered, runs COMMAND (if any), then leaves and waits until every party has
left; it exits with COMMAND's status (exit 75 when --timeout runs out while
waiting). A party that dies stops counting after --ttl: it does not keep the
others waiting to leave forever. On Redis, etcd and PostgreSQL.

examples:
  dlock barrier --parties 4 --timeout 5m migrate-step -- ./migrate --step 2`,
		flags: func() *flag.FlagSet { return new(syncFlags).define("barrier") },
		run:   runBarrier,
	}
}

// syncArgs parses a latch or barrier command line and connects.
func syncArgs(ctx context.Context, e *env, c command, args []string) (o *syncFlags, a parsedArgs, d driver.SyncDriver, st store, code int) {
	o = new(syncFlags)
	a, code, ok := parseFlags(e, c, o.define(c.name), args)
	if !ok {
		return nil, a, nil, nil, code
	}
	if o.n < 1 {
		what := "--parties"
		if c.name == "latch" {
			what = "--count"
		}
		return nil, a, nil, nil, fail(e, c.name, usageErrorf("%s N is required, at least 1", what))
	}
	if o.timeout < 0 {
		return nil, a, nil, nil, fail(e, c.name, usageErrorf("--timeout %v is negative", o.timeout))
	}
	st, err := o.servers.open(ctx, e)
	if err != nil {
		return nil, a, nil, nil, fail(e, c.name, err)
	}
	if d, err = syncStore(st); err != nil {
		st.close()
		return nil, a, nil, nil, fail(e, c.name, err)
	}
	return o, a, d, st, exitOK
}

// waitCtx bounds ctx by --timeout.
func (o *syncFlags) waitCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if o.timeout == 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, o.timeout)
}

// waitFailed reports a wait that ended: exit 75 for --timeout.
func waitFailed(e *env, c string, err error) int {
	if errors.Is(err, context.DeadlineExceeded) {
		fmt.Fprintf(e.stderr, "dlock %s: gave up after --timeout\n", c)
		return exitNotObtained
	}
	return fail(e, c, err)
}

// madeWith reads the size a latch or barrier was made with, and the one asked
// for, from a backend's conflict error.
var madeWith = regexp.MustCompile(`made with (?:count )?(\d+)(?: parties)?, (?:not|this one with) (\d+)`)

// syncConflict explains a conflict of the latch or barrier (what) name, whose
// size flag is flag: made with another size (exit 65, both named), or a name
// that holds other data.
func syncConflict(what, name, flag string, err error) error {
	if !errors.Is(err, dlock.ErrConflict) {
		return err
	}
	if m := madeWith.FindStringSubmatch(err.Error()); m != nil {
		return &exitError{code: exitDataErr, err: err, msg: fmt.Sprintf("the %s %q was made with %s %s, not %s: every process gives the same %s %s (or waits until the %s is forgotten, --ttl after its last use)",
			what, name, flag, m[1], m[2], flag, m[1], what)}
	}
	return &exitError{code: exitDataErr, err: err, msg: fmt.Sprintf("%q holds data that is not a dlock %s: %v", name, what, err)}
}

func runLatch(ctx context.Context, e *env, args []string) int {
	c := latchCommand()
	o, a, d, st, code := syncArgs(ctx, e, c, args)
	if o == nil {
		return code
	}
	defer st.close()
	if a.dashdash || len(a.before) != 2 {
		return fail(e, c.name, usageErrorf("want a verb (count-down, wait or count) and a NAME"))
	}
	l, err := dlock.NewLatch(d, a.before[1], o.n, o.ttl)
	if err != nil {
		return fail(e, c.name, syncConflict("latch", a.before[1], "--count", err))
	}
	switch a.before[0] {
	case "count-down":
		left, err := l.CountDown(ctx)
		if err != nil {
			return fail(e, c.name, syncConflict("latch", a.before[1], "--count", err))
		}
		fmt.Fprintln(e.stdout, left)
	case "count":
		n, err := l.Count(ctx)
		if err != nil {
			return fail(e, c.name, syncConflict("latch", a.before[1], "--count", err))
		}
		fmt.Fprintln(e.stdout, n)
	case "wait":
		wctx, cancel := o.waitCtx(ctx)
		defer cancel()
		if err := l.Wait(wctx); err != nil {
			return waitFailed(e, c.name, syncConflict("latch", a.before[1], "--count", err))
		}
	default:
		return fail(e, c.name, usageErrorf("unknown verb %q: want count-down, wait or count", a.before[0]))
	}
	return exitOK
}

func runBarrier(ctx context.Context, e *env, args []string) int {
	c := barrierCommand()
	o, a, d, st, code := syncArgs(ctx, e, c, args)
	if o == nil {
		return code
	}
	defer st.close()
	if len(a.before) != 1 {
		return fail(e, c.name, usageErrorf("want one NAME (and the command after --)"))
	}
	b, err := dlock.NewBarrier(d, a.before[0], o.n, o.ttl)
	if err != nil {
		return fail(e, c.name, err)
	}
	wctx, cancel := o.waitCtx(ctx)
	err = b.Enter(wctx)
	cancel()
	if err != nil {
		return waitFailed(e, c.name, err)
	}
	status := exitOK
	if len(a.after) > 0 {
		status = runChild(ctx, e, a.after)
	}
	wctx, cancel = o.waitCtx(ctx)
	defer cancel()
	if err := b.Leave(wctx); err != nil {
		return waitFailed(e, c.name, err)
	}
	return status
}

// runChild runs argv with the command's standard streams and returns its exit
// status (126 not executable, 127 not found, 128+n killed by signal n).
func runChild(ctx context.Context, e *env, argv []string) int {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = e.stdin, e.stdout, e.stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, os.ErrNotExist):
		fmt.Fprintf(e.stderr, "dlock barrier: %v\n", err)
		return exitNotFound
	}
	fmt.Fprintf(e.stderr, "dlock barrier: %v\n", err)
	return exitNotExec
}
