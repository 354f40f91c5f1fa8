package dlock

import (
	"fmt"
	"time"
)

// Lease times: the limits every TTL is checked against, and the margin kept off
// a lease's validity for clock drift.

const (
	// DefaultTTL is the lease time when WithTTL is not given. Leases with the default
	// TTL are renewed automatically while held.
	DefaultTTL = 15 * time.Second

	// DefaultDriftFactor is the share of the TTL subtracted from a lease's local
	// validity to allow for clock rate differences between client and server.
	DefaultDriftFactor = 0.01

	// DriftFloor is added to every drift margin: stores expire keys with a
	// precision of one millisecond, plus one millisecond of minimum drift.
	DriftFloor = 2 * time.Millisecond

	// MinTTL and MaxTTL bound every lease time. A TTL that is not a whole number of
	// milliseconds is rounded up to the next millisecond.
	MinTTL = 5 * time.Millisecond
	MaxTTL = 30 * 24 * time.Hour
)

// driftMargin is the part of a TTL kept in reserve for clock drift:
// ttl*factor + DriftFloor. A lease's local validity is its TTL minus it.
func driftMargin(ttl time.Duration, factor float64) time.Duration {
	return time.Duration(float64(ttl)*factor) + DriftFloor
}

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

// checkValidity refuses a TTL that the drift margin would leave less than half
// of as local validity.
func checkValidity(ttl time.Duration, factor float64) error {
	if m := driftMargin(ttl, factor); m >= ttl/2 {
		return invalidf("ttl %v leaves no validity after the drift margin %v", ttl, m)
	}
	return nil
}
