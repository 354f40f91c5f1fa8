package driver

import (
	"fmt"
	"time"
)

// NormalizeTTL validates a lease time against DefaultTTLLimits and rounds it up to
// a whole millisecond, the finest resolution among the backends. It returns an error
// matching ErrInvalid for a TTL outside [MinTTL, MaxTTL]. A Client checks TTLs
// against its driver's limits instead (see TTLLimiter).
func NormalizeTTL(ttl time.Duration) (time.Duration, error) {
	return DefaultTTLLimits.Normalize(ttl)
}

// TTLLimits are the lease times a driver can grant.
type TTLLimits struct {
	Min, Max time.Duration // the shortest and the longest TTL
	Step     time.Duration // the resolution: TTLs are rounded up to a multiple of it
}

// DefaultTTLLimits are the limits of a driver that does not implement TTLLimiter:
// [MinTTL, MaxTTL] in whole milliseconds.
var DefaultTTLLimits = TTLLimits{Min: MinTTL, Max: MaxTTL, Step: time.Millisecond}

// TTLLimiter is implemented by drivers whose TTLs differ from DefaultTTLLimits
// (for example etcd grants leases in whole seconds). The Client checks every TTL
// against them before any I/O.
type TTLLimiter interface {
	TTLLimits() TTLLimits
}

// Normalize rounds ttl up to the limits' step and checks it lies within them. The
// error matches ErrInvalid and names the range.
func (lim TTLLimits) Normalize(ttl time.Duration) (time.Duration, error) {
	step := max(lim.Step, 1)
	if ttl > 0 && ttl <= lim.Max {
		if r := ttl % step; r > 0 {
			ttl += step - r
		}
		if ttl >= lim.Min && ttl <= lim.Max {
			return ttl, nil
		}
	}
	if ttl < lim.Min {
		return 0, fmt.Errorf("%w: ttl %v below the minimum %v (the backend grants [%v, %v] in steps of %v)",
			ErrInvalid, ttl, lim.Min, lim.Min, lim.Max, step)
	}
	return 0, fmt.Errorf("%w: ttl %v above the maximum %v (the backend grants [%v, %v] in steps of %v)",
		ErrInvalid, ttl, lim.Max, lim.Min, lim.Max, step)
}

// MinTTL and MaxTTL bound every lease time; they are dlock.MinTTL and
// dlock.MaxTTL.
const (
	MinTTL = 5 * time.Millisecond
	MaxTTL = 30 * 24 * time.Hour
)
