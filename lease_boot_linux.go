package dlock

import (
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// readBootClock returns CLOCK_BOOTTIME: monotonic, and counting time suspended.
// clock_gettime never blocks, so it is made as a raw system call, without the
// scheduler hand-off of a blocking one: it is read on every acquisition.
func readBootClock() (time.Duration, bool) {
	var ts unix.Timespec
	_, _, errno := unix.RawSyscall(unix.SYS_CLOCK_GETTIME, unix.CLOCK_BOOTTIME, uintptr(unsafe.Pointer(&ts)), 0)
	if errno != 0 {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
