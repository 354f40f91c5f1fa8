//go:build !linux

package dlock

import "time"

// readBootClock reports no suspend-aware clock: elsewhere the lease deadline is on
// Go's monotonic clock alone.
func readBootClock() (time.Duration, bool) { return 0, false }
