//go:build !linux

package main

import "os/exec"

// startChild starts cmd. Outside Linux a child outlives a dlock killed by
// SIGKILL, and orphans of the command are reaped by init, not dlock.
func startChild(cmd *exec.Cmd) error { return cmd.Start() }
