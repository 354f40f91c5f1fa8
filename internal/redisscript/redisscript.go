// Package redisscript holds the Lua scripts of dlock's Redis-protocol backends,
// embedded and wrapped as go-redis scripts (EVALSHA, falling back to EVAL on
// NOSCRIPT).
package redisscript

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed acquire.lua
	acquireSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed extend.lua
	extendSrc string
	//go:embed pttl.lua
	pttlSrc string
	//go:embed fence.lua
	fenceSrc string
)

// Mutex scripts. See each .lua file for its keys, arguments and reply.
var (
	Acquire = redis.NewScript(acquireSrc)
	Release = redis.NewScript(releaseSrc)
	Extend  = redis.NewScript(extendSrc)
	PTTL    = redis.NewScript(pttlSrc)
)

// Fenced runs one fenced write (set, incrby or del) on a resource. See fence.lua.
var Fenced = redis.NewScript(fenceSrc)
