package dlock

import (
	"time"

	"github.com/dlock-go/dlock/driver"
)

// Lease times: the limits every TTL is checked against, and the margin kept off
// a lease's validity for clock drift.

const (
	// DefaultTTL is the lease time when WithTTL is not given. Leases with the default
	// TTL are renewed automatically while held.
	DefaultTTL = 15 * time.Second

	// defaultDriftFactor is the share of the TTL subtracted from a lease's local
	// validity to allow for clock rate differences between client and server.
	defaultDriftFactor = 0.01

	// driftFloor is added to every drift margin: stores expire keys with a
	// precision of one millisecond, plus one millisecond of minimum drift.
	driftFloor = 2 * time.Millisecond

	// MinTTL and MaxTTL bound every lease time. A TTL that is not a whole number of
	// milliseconds is rounded up to the next millisecond.
	MinTTL = driver.MinTTL
	MaxTTL = driver.MaxTTL
)

// driftMargin is the part of a TTL kept in reserve for clock drift:
// ttl*factor + driftFloor. A lease's local validity is its TTL minus it.
func driftMargin(ttl time.Duration, factor float64) time.Duration {
	return time.Duration(float64(ttl)*factor) + driftFloor
}

// checkValidity refuses a TTL that the drift margin would leave less than half
// of as local validity.
func checkValidity(ttl time.Duration, factor float64) error {
	if m := driftMargin(ttl, factor); m >= ttl/2 {
		return invalidf("ttl %v leaves no validity after the drift margin %v", ttl, m)
	}
	return nil
}
