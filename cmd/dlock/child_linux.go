package main

import (
	"os/exec"
	"runtime"
	"syscall"
)

// startChild starts cmd so that it gets SIGTERM if dlock dies without stopping
// it (for example by SIGKILL): it must not go on running without the lock.
func startChild(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	// The parent-death signal follows the thread that started the child: keep
	// that thread alive (unlocking keeps it in the runtime's pool).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return cmd.Start()
}
