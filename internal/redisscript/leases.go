package redisscript

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed leases.lua
	leasesSrc string
	//go:embed semacquire.lua
	semAcquireSrc string
	//go:embed semrelease.lua
	semReleaseSrc string
	//go:embed semlib.lua
	semLibSrc string
	//go:embed semresize.lua
	semResizeSrc string
	//go:embed rwacquire.lua
	rwAcquireSrc string
	//go:embed rwrelease.lua
	rwReleaseSrc string
	//go:embed leaseextend.lua
	leaseExtendSrc string
	//go:embed leasettl.lua
	leaseTTLSrc string
	//go:embed leaseinspect.lua
	leaseInspectSrc string
	//go:embed leaseforce.lua
	leaseForceSrc string
)

// leaseScript is a script of the locks with several holders: token.lua,
// fairlib.lua and leases.lua followed by the script's own files.
func leaseScript(src ...string) *redis.Script {
	return script(append([]string{tokenSrc, fairLibSrc, leasesSrc}, src...)...)
}

// Scripts of the locks with several holders: the semaphore and the read-write
// lock. See each .lua file for its keys, arguments and reply.
var (
	SemAcquire   = leaseScript(semLibSrc, semAcquireSrc)
	SemRelease   = leaseScript(semLibSrc, semReleaseSrc)
	SemResize    = leaseScript(semLibSrc, semResizeSrc)
	RWAcquire    = leaseScript(rwAcquireSrc)
	RWRelease    = leaseScript(rwReleaseSrc)
	LeaseExtend  = leaseScript(leaseExtendSrc)
	LeaseTTL     = leaseScript(leaseTTLSrc)
	LeaseInspect = leaseScript(leaseInspectSrc)
	LeaseForce   = leaseScript(leaseForceSrc)
)
