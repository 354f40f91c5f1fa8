//go:build !linux

package main

import (
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// startChild starts cmd. Outside Linux a child outlives a dlock killed by
// SIGKILL, and orphans of the command are reaped by init, not dlock.
func startChild(cmd *exec.Cmd) error { return cmd.Start() }

// stopJob stops dlock's own job (SIGTSTP to its process group, as the terminal
// would). Outside Linux the stop may take effect only after it returns.
func stopJob() { _ = unix.Kill(0, syscall.SIGTSTP) }
