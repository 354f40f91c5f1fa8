package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// handoffFlags are the flags of dlock lock and dlock extend.
type handoffFlags struct {
	servers     servers
	ttl         durationFlag
	wait        durationFlag
	fair        bool
	conflict    int
	description string
}

func (o *handoffFlags) define(name string) *flag.FlagSet {
	fs := newFlagSet(name)
	o.servers.define(fs)
	o.ttl = durationFlag{min: minRunTTL, max: dlock.MaxTTL, wholeMS: true, def: "required"}
	fs.Var(&o.ttl, "ttl", "how long the lock is held (`DURATION`) unless extended or unlocked: nothing renews it")
	if name == "lock" {
		o.wait = durationFlag{zero: "try once", def: "try once"}
		fs.Var(&o.wait, "wait", "wait at most `DURATION` for the lock, then exit 75 (-E)")
		fs.BoolVar(&o.fair, "fair", false, "first come, first served among waiters")
		fs.IntVar(&o.conflict, "E", exitNotObtained, "exit `CODE` when the lock is not obtained within --wait")
		fs.StringVar(&o.description, "description", "", "free-form `TEXT` shown by status and list")
	}
	return fs
}

func lockCommand() command {
	return command{
		name: "lock", summary: "take a lock and print a reference that a later step extends or unlocks",
		synopsis: "dlock lock --ttl DURATION [flags] KEY",
		help: `Takes the lock KEY for --ttl and prints on stdout a reference to the holding
(one word), which "dlock extend" and "dlock unlock" take, in this process or in a
later step of a pipeline on another machine. Nothing renews the lock: it is held
until it is unlocked or --ttl runs out, whatever happens to the step that took
it. "dlock status KEY" shows it as held.

The reference is a bearer credential for that one holding: whoever has it can
extend or release the lock. Keep it as a pipeline secret.

exit codes:
  0        held; the reference is on stdout
  75 (-E)  not obtained within --wait (default: one attempt)
  64       bad usage
  69       the server is unreachable or failing
  65       the key holds data that is not a dlock lock

examples:
  REF=$(dlock lock --ttl 30m deploy:prod)
  dlock extend --ttl 30m "$REF"
  dlock unlock "$REF"`,
		flags: func() *flag.FlagSet { return new(handoffFlags).define("lock") },
		run:   runLock,
	}
}

func extendCommand() command {
	return command{
		name: "extend", summary: "extend a lock taken with dlock lock, from its reference",
		synopsis: "dlock extend --ttl DURATION [flags] REF",
		help: `Resets the time left of the holding REF (printed by "dlock lock" or "dlock
extend") to --ttl, if it is still held, and prints its reference again (the same
holding, with the new TTL). Exits 1 when the holding is gone (unlocked, expired,
forced), touching nothing.

examples:
  REF=$(dlock extend --ttl 1h "$REF")`,
		flags: func() *flag.FlagSet { return new(handoffFlags).define("extend") },
		run:   runExtend,
	}
}

// parseHandoff parses the flags and the single argument of lock and extend.
func parseHandoff(e *env, c command, args []string) (*handoffFlags, string, int, bool) {
	o := new(handoffFlags)
	fs := o.define(c.name)
	a, code, ok := parseFlags(e, c, fs, args)
	if !ok {
		return nil, "", code, false
	}
	rest := append(a.before, a.after...)
	what := strings.Fields(c.synopsis)[len(strings.Fields(c.synopsis))-1]
	switch {
	case len(rest) != 1:
		return nil, "", fail(e, c.name, usageErrorf("one %s expected, got %d arguments", what, len(rest))), false
	case !o.ttl.set:
		return nil, "", fail(e, c.name, usageErrorf("--ttl is required: nothing renews the lock")), false
	}
	return o, rest[0], exitOK, true
}

func runLock(ctx context.Context, e *env, args []string) int {
	c := lockCommand()
	o, key, code, ok := parseHandoff(e, c, args)
	if !ok {
		return code
	}
	if err := driver.ValidateKey(key); err != nil {
		return fail(e, c.name, err)
	}
	st, err := o.servers.open(ctx, e)
	if err != nil {
		return fail(e, c.name, err)
	}
	defer st.close()
	kind := plainLock
	if o.fair {
		kind = fairLock
	}
	opts := []dlock.Option{dlock.WithTTL(o.ttl.d), dlock.WithAutoRenew(false), dlock.WithMetadata(holderRecord(o.description).Encode())}
	locker, err := st.locker(kind, 1, opts...)
	if err != nil {
		return fail(e, c.name, err)
	}
	var lease *dlock.Lease
	if o.wait.d > 0 {
		lease, err = locker.Lock(ctx, key, dlock.WithWait(o.wait.d))
	} else {
		lease, err = locker.TryLock(ctx, key)
	}
	if errors.Is(err, dlock.ErrNotObtained) {
		fmt.Fprintf(e.stderr, "dlock lock: %q is held by another process\n", key)
		return o.conflict
	}
	if err != nil {
		return fail(e, c.name, st.explain(ctx, key, err))
	}
	ref, err := lease.Detach()
	if err != nil {
		_ = lease.Unlock(context.WithoutCancel(ctx))
		return fail(e, c.name, err)
	}
	fmt.Fprintln(e.stdout, ref)
	return exitOK
}

func runExtend(ctx context.Context, e *env, args []string) int {
	c := extendCommand()
	o, ref, code, ok := parseHandoff(e, c, args)
	if !ok {
		return code
	}
	return withRef(ctx, e, c.name, &o.servers, ref, func(cl *dlock.Client) int {
		lease, err := cl.Resume(ctx, ref, dlock.WithTTL(o.ttl.d), dlock.WithAutoRenew(false))
		if err != nil {
			return refFailure(e, c.name, err)
		}
		next, err := lease.Detach()
		if err != nil {
			return fail(e, c.name, err)
		}
		fmt.Fprintln(e.stdout, next)
		return exitOK
	})
}

// unlockRef releases the holding ref names, owner-checked: what "dlock
// unlock REF" does, without --force.
func unlockRef(ctx context.Context, e *env, s *servers, ref string) int {
	return withRef(ctx, e, "unlock", s, ref, func(cl *dlock.Client) int {
		lease, err := cl.Resume(ctx, ref, dlock.WithAutoRenew(false))
		if err == nil {
			err = lease.Unlock(ctx)
		}
		if err != nil {
			return refFailure(e, "unlock", err)
		}
		fmt.Fprintf(e.stdout, "released lock %q (token %d)\n", lease.Key(), lease.Token())
		return exitOK
	})
}

// withRef reads ref, connects to the servers s names, and runs fn with a
// Client of the kind of lock ref names.
func withRef(ctx context.Context, e *env, cmd string, s *servers, ref string, fn func(*dlock.Client) int) int {
	r, err := driver.ParseRef(ref)
	if err != nil {
		return fail(e, cmd, err)
	}
	kind := plainLock
	switch r.Kind {
	case driver.KindMutex:
	case driver.KindFair:
		kind = fairLock
	default:
		return fail(e, cmd, usageErrorf("a reference to a %s lock: dlock lock takes plain and fair locks only", r.Kind))
	}
	st, err := s.open(ctx, e)
	if err != nil {
		return fail(e, cmd, err)
	}
	defer st.close()
	locker, err := st.locker(kind, 1)
	if err != nil {
		return fail(e, cmd, err)
	}
	cl, ok := locker.(*dlock.Client)
	if !ok {
		return fail(e, cmd, fmt.Errorf("%w: the %s lock on %s cannot take up a reference", errors.ErrUnsupported, r.Kind, st))
	}
	return fn(cl)
}

// refFailure reports a reference that could not be taken up: exit 1 when
// the holding is gone.
func refFailure(e *env, cmd string, err error) int {
	if errors.Is(err, dlock.ErrNotHeld) {
		fmt.Fprintf(e.stderr, "dlock %s: %s\n", cmd, strings.TrimPrefix(oneLine(err), "dlock: "))
		return exitFailure
	}
	return fail(e, cmd, err)
}
