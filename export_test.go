package dlock

import "time"

// SetBootClock replaces the suspend-aware clock for a test and returns a function
// that restores it.
func SetBootClock(f func() (time.Duration, bool)) (restore func()) {
	old := bootClock
	bootClock = f
	return func() { bootClock = old }
}
