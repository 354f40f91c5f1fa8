//go:build !linux

package main

import (
	"os"
	"os/exec"
)

// startChild starts cmd. Outside Linux a child outlives a dlock killed by SIGKILL.
func startChild(cmd *exec.Cmd) error { return cmd.Start() }

// fromTerminal reports whether s was sent to the command by the terminal too.
// Outside Linux every signal is forwarded.
func fromTerminal(os.Signal) bool { return false }
