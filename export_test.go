package dlock

import "time"

// SetBootClock replaces the suspend-aware clock for a test and returns a function
// that restores it.
func SetBootClock(f func() (time.Duration, bool)) (restore func()) {
	old := bootClock
	bootClock = f
	return func() { bootClock = old }
}

// SetLostHook sets a function that runs when a lease is lost, once the loss is
// visible to other goroutines and before the goroutine that ended the lease
// moves on, and returns a function that removes it.
func SetLostHook(f func(*Lease)) (restore func()) {
	lostHook.Store(&f)
	return func() { lostHook.Store(nil) }
}

// The limits that tests check against.
const (
	DriftFloor         = driftFloor
	DefaultDriftFactor = defaultDriftFactor
	MaxGroupKeys       = maxGroupKeys
)
