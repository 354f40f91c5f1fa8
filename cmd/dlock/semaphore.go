package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/redislock"
)

// semaphoreFlags are the flags of the semaphore command.
type semaphoreFlags struct{ servers servers }

func (o *semaphoreFlags) define() *flag.FlagSet {
	fs := newFlagSet("semaphore")
	o.servers.define(fs)
	return fs
}

func semaphoreCommand() command {
	return command{
		name: "semaphore", summary: "change the number of permits of a semaphore at run time",
		synopsis: "dlock semaphore resize [flags] KEY N",
		help: `"resize" sets the number of permits of the semaphore KEY (the one that
"dlock run -n" takes) to N for every process, whatever -n they were started
with: the size is stored on the server, kept after the last permit is
released, and is the one in force from then on (runs started with the size
before the first resize or with the size in force go on working; another -n
is exit 65). When the size is lowered, the holders above it keep their permits
until they finish, and no permit is granted until they are fewer than N; when
it is raised, waiting runs are served at once. "dlock status KEY" shows the
permits in use and the size ("2 of 3"). On Redis and PostgreSQL.

examples:
  dlock semaphore resize builds 8      # allow 8 concurrent builds from now on
  dlock run -n 4 builds -- ./build     # one of the permits, whatever their number`,
		flags: func() *flag.FlagSet { return new(semaphoreFlags).define() },
		run:   runSemaphore,
	}
}

func runSemaphore(ctx context.Context, e *env, args []string) int {
	c := semaphoreCommand()
	o := new(semaphoreFlags)
	a, code, ok := parseFlags(e, c, o.define(), args)
	if !ok {
		return code
	}
	if a.dashdash || len(a.before) != 3 || a.before[0] != "resize" {
		return fail(e, c.name, usageErrorf("want the verb resize, a KEY and a number N"))
	}
	key := a.before[1]
	n, err := strconv.Atoi(a.before[2])
	if err != nil || n < 1 || n > redislock.MaxPermits {
		return fail(e, c.name, usageErrorf("N %q: want a number of permits from 1 to %d", a.before[2], redislock.MaxPermits))
	}
	st, err := o.servers.open(ctx, e)
	if err != nil {
		return fail(e, c.name, err)
	}
	defer st.close()
	var rz driver.Resizer
	switch s := st.(type) {
	case *redisStore:
		rz, err = redislock.NewSemaphoreDriver(s.rdb, redislock.StoredSize)
	case pgStore:
		rz, err = s.resizer()
	case mysqlStore:
		rz, err = s.resizer()
	default:
		return fail(e, c.name, usageErrorf("semaphores need --redis (one server or a Cluster), --postgres or --mysql, not %s", st))
	}
	if err != nil {
		return fail(e, c.name, err)
	}
	if err := rz.Resize(ctx, key, n); err != nil {
		return fail(e, c.name, st.explain(ctx, key, err))
	}
	fmt.Fprintf(e.stderr, "dlock semaphore: %q has %d permits on %s\n", key, n, st)
	return exitOK
}
