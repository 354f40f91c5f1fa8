package dlock

import (
	"time"

	"golang.org/x/sys/unix"
)

// readBootClock returns CLOCK_BOOTTIME: monotonic, and counting time suspended
// (a lease whose machine slept past its deadline is lost on wake-up).
func readBootClock() (time.Duration, bool) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
