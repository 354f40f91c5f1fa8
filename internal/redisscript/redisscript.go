// Package redisscript holds the Lua scripts of dlock's Redis-protocol backends,
// embedded and wrapped as go-redis scripts (EVALSHA, falling back to EVAL on
// NOSCRIPT).
package redisscript

import (
	"context"
	_ "embed"
	"strings"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lib.lua
	libSrc string
	//go:embed inspect.lua
	inspectSrc string
	//go:embed token.lua
	tokenSrc string
	//go:embed acquire.lua
	acquireSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed abandon.lua
	abandonSrc string
	//go:embed wake.lua
	wakeSrc string
	//go:embed pass.lua
	passSrc string
	//go:embed extendlib.lua
	extendLibSrc string
	//go:embed extend.lua
	extendSrc string
	//go:embed result.lua
	resultSrc string
	//go:embed resume.lua
	resumeSrc string
	//go:embed extendmany.lua
	extendManySrc string
	//go:embed pttl.lua
	pttlSrc string
	//go:embed fence.lua
	fenceSrc string
	//go:embed raise.lua
	raiseSrc string
	//go:embed fairlib.lua
	fairLibSrc string
	//go:embed fairmutex.lua
	fairMutexSrc string
	//go:embed fairacquire.lua
	fairAcquireSrc string
	//go:embed fairrelease.lua
	fairReleaseSrc string
)

// TokenLib is the source of the fencing-token functions (token.lua), for the
// scripts of other packages that draw tokens the same way.
var TokenLib = tokenSrc

// script returns the script made of srcs after lib.lua, the checks every
// script shares.
func script(srcs ...string) *redis.Script {
	return redis.NewScript(libSrc + strings.Join(srcs, ""))
}

// Inspect reads a mutex (plain, fair or reentrant) without changing it. See
// inspect.lua.
var Inspect = script(inspectSrc)

// Mutex scripts, each after lib.lua. See each .lua file for its keys,
// arguments and reply. Acquire and Release run on the plain lock's hot path,
// from arguments the caller lays out (see Lean).
var (
	Acquire = lean(acquireSrc)
	Release = lean(wakeSrc, releaseSrc)
	Abandon = script(wakeSrc, abandonSrc)
	Pass    = script(wakeSrc, passSrc)
	Extend  = script(extendLibSrc, extendSrc)
	Resume  = script(extendLibSrc, resumeSrc)
	PTTL    = script(pttlSrc)
	Result  = script(resultSrc)
)

// ExtendMany extends many mutexes (plain or fair) on one server in one call,
// each as Extend does. See extendmany.lua.
var ExtendMany = script(extendLibSrc, extendManySrc)

// Raise records on one server the fencing token that a quorum of servers handed
// out (Redlock). See raise.lua.
var Raise = script(raiseSrc)

// Fenced runs one fenced write (set, incrby or del) on a resource. See fence.lua.
var Fenced = script(fenceSrc)

// Fair (FIFO) mutex scripts: fairmutex.lua followed by each script's own file
// (after lib.lua). They share Extend and PTTL with the mutex.
var (
	FairAcquire = script(fairMutexSrc, fairAcquireSrc)
	FairRelease = script(fairMutexSrc, fairReleaseSrc)
)

// Retake, as the Handle of an AcquireRequest to redislock's mutex driver, makes
// an attempt that finds the lock held by its owner take it anew, with a new
// token, rather than return that holding (see acquire.lua's ARGV[3]). Redlock's
// attempts carry it, so that a clean-up of an earlier attempt (a Drawn release)
// that lands late leaves the later attempt's holding alone.
type Retake struct{}

// Drawn, as the Handle of a Holding released by redislock's mutex driver, limits
// the release to a holding with Token, the token of the attempt being cleaned
// up: a holding that a later attempt of the owner took anew stays. The release
// leaves no abandon mark.
type Drawn struct {
	Token uint64
}

// Lean is a script that the caller runs from a command line it lays out
// itself, so that a call allocates no more than go-redis's command and reply:
// the caller may reuse the slice, and pass its strings as *string (which
// go-redis writes, and reads a Cluster slot from, as it does a string).
type Lean struct {
	hash, src string
}

// lean returns the Lean script made of srcs after lib.lua.
func lean(srcs ...string) *Lean {
	src := libSrc + strings.Join(srcs, "")
	return &Lean{hash: redis.NewScript(src).Hash(), src: src}
}

// Hash is the script's SHA1, as EVALSHA names it.
func (l *Lean) Hash() string { return l.hash }

// Processor is what runs a command: a go-redis client or pipeline.
type Processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// LeanArgs is how many elements of a Lean call's command line Run fills
// before the number of keys: the command and the script.
const LeanArgs = 2

// Run runs the script with argv, a whole EVALSHA command line whose first
// LeanArgs elements Run sets: argv[2] is the number of keys as a string (a
// constant, so that go-redis finds the first key without formatting it), then
// come the keys and the arguments. A server that does not have the script
// cached (NOSCRIPT) gets it with EVAL. argv may be reused once the returned
// command's reply has been read.
func (l *Lean) Run(ctx context.Context, p Processor, argv []any) *redis.Cmd {
	argv[0], argv[1] = "evalsha", &l.hash
	cmd := redis.NewCmd(ctx, argv...)
	if err := p.Process(ctx, cmd); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		argv[0], argv[1] = "eval", &l.src
		cmd = redis.NewCmd(ctx, argv...)
		_ = p.Process(ctx, cmd)
	}
	return cmd
}

// Queue adds the script's call with argv to the pipeline p as EVALSHA (eval
// false) or EVAL, and returns its command; see Run for argv.
func (l *Lean) Queue(ctx context.Context, p Processor, argv []any, eval bool) *redis.Cmd {
	argv[0], argv[1] = "evalsha", &l.hash
	if eval {
		argv[0], argv[1] = "eval", &l.src
	}
	cmd := redis.NewCmd(ctx, argv...)
	_ = p.Process(ctx, cmd)
	return cmd
}
