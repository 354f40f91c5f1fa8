// Package redisscript holds the Lua scripts of dlock's Redis-protocol backends,
// embedded and wrapped as go-redis scripts (EVALSHA, falling back to EVAL on
// NOSCRIPT).
package redisscript

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
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
	//go:embed extend.lua
	extendSrc string
	//go:embed pttl.lua
	pttlSrc string
	//go:embed fence.lua
	fenceSrc string
	//go:embed raise.lua
	raiseSrc string
	//go:embed fairlib.lua
	fairLibSrc string
	//go:embed fairacquire.lua
	fairAcquireSrc string
	//go:embed fairrelease.lua
	fairReleaseSrc string
)

// Mutex scripts. See each .lua file for its keys, arguments and reply.
var (
	Acquire = redis.NewScript(tokenSrc + acquireSrc)
	Release = redis.NewScript(wakeSrc + releaseSrc)
	Abandon = redis.NewScript(wakeSrc + abandonSrc)
	Pass    = redis.NewScript(wakeSrc + passSrc)
	Extend  = redis.NewScript(extendSrc)
	PTTL    = redis.NewScript(pttlSrc)
)

// Raise records on one server the fencing token that a quorum of servers handed
// out (Redlock). See raise.lua.
var Raise = redis.NewScript(raiseSrc)

// Fenced runs one fenced write (set, incrby or del) on a resource. See fence.lua.
var Fenced = redis.NewScript(fenceSrc)

// Fair (FIFO) mutex scripts: token.lua and fairlib.lua followed by each script's
// own file. They share Extend and PTTL with the mutex.
var (
	FairAcquire = redis.NewScript(tokenSrc + fairLibSrc + fairAcquireSrc)
	FairRelease = redis.NewScript(tokenSrc + fairLibSrc + fairReleaseSrc)
)
