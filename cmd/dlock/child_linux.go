package main

import (
	"os/exec"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// startChild starts cmd so that it gets SIGTERM if dlock dies without stopping
// it (for example by SIGKILL): it must not go on running without the lock.
// dlock becomes the subreaper of the command's descendants, so that the
// processes its job leaves behind are reaped by dlock and their end seen.
func startChild(cmd *exec.Cmd) error {
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	cmd.SysProcAttr.Pdeathsig = syscall.SIGTERM
	// The parent-death signal follows the thread that started the child: keep
	// that thread alive (unlocking keeps it in the runtime's pool).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return cmd.Start()
}

// stopJob stops dlock's own job (SIGTSTP to its process group, as the terminal
// would) and returns once it is continued. The signal to dlock's own thread
// makes the stop take effect before the call returns; in an orphaned process
// group the kernel discards it and the call returns at once.
func stopJob() {
	_ = unix.Kill(0, syscall.SIGTSTP)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_ = unix.Tgkill(unix.Getpid(), unix.Gettid(), syscall.SIGTSTP)
}
