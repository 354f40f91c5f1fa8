package main

import (
	"os"
	"os/exec"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
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

// fromTerminal reports whether s is a SIGINT or SIGQUIT that the controlling
// terminal sent to dlock's whole process group (Ctrl-C, Ctrl-\), which includes
// the command: it already has it, and forwarding would deliver it twice.
func fromTerminal(s os.Signal) bool {
	if s != syscall.SIGINT && s != syscall.SIGQUIT {
		return false
	}
	tty, err := os.Open("/dev/tty")
	if err != nil {
		return false
	}
	defer tty.Close()
	fg, err := unix.IoctlGetInt(int(tty.Fd()), unix.TIOCGPGRP)
	return err == nil && fg == unix.Getpgrp()
}
