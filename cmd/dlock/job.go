package main

import (
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// job is the command dlock run supervises, as the leader of a process group of
// its own: signals for the command go to the whole group, so that what the
// command started (a pipeline, a background job, "sh -c 'a & b'") is stopped
// with it. A descendant that leaves the group (setsid, setpgid: daemons, some
// shells' job control) escapes and is not signalled.
//
// When dlock is the foreground job of its controlling terminal, the group gets
// the terminal's foreground: the command reads the terminal and gets Ctrl-C,
// Ctrl-\ and Ctrl-Z there as it would without dlock. When it stops (Ctrl-Z),
// dlock takes the terminal back and stops its own job, so the shell sees the
// job stopped; when the shell continues it, dlock continues the command.
type job struct {
	cmd    *exec.Cmd
	pgid   int
	tty    *os.File // the controlling terminal when the group was given it
	events chan syscall.WaitStatus
}

// startJob starts cmd as the leader of a new process group.
func startJob(cmd *exec.Cmd) (*job, error) {
	j := &job{cmd: cmd, events: make(chan syscall.WaitStatus, 1)}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if tty := foregroundTerminal(); tty != nil {
		cmd.SysProcAttr.Foreground = true
		cmd.SysProcAttr.Ctty = int(tty.Fd())
		j.tty = tty
	}
	if err := startChild(cmd); err != nil {
		j.closeTerminal()
		return nil, err
	}
	j.pgid = cmd.Process.Pid
	go j.reap()
	return j, nil
}

// foregroundTerminal opens the controlling terminal when dlock's process
// group is in its foreground, and returns nil otherwise.
func foregroundTerminal() *os.File {
	tty, err := os.Open("/dev/tty")
	if err != nil {
		return nil
	}
	if !inForeground(tty) {
		tty.Close()
		return nil
	}
	return tty
}

func inForeground(tty *os.File) bool {
	fg, err := unix.IoctlGetInt(int(tty.Fd()), unix.TIOCGPGRP)
	return err == nil && fg == unix.Getpgrp()
}

// reap waits for dlock's children: it reports when the leader stops or ends,
// and reaps the job's orphans that dlock adopted (see adoptOrphans). It
// returns when dlock has no child left.
func (j *job) reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WUNTRACED, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil:
			return // ECHILD
		case pid != j.cmd.Process.Pid:
			continue // an adopted orphan: reaped
		case ws.Stopped() && j.tty == nil:
			continue // stopped by somebody's signal, not the terminal: theirs to continue
		}
		j.events <- ws
	}
}

// signal sends s to every process of the job. A job that has ended is not an
// error.
func (j *job) signal(s syscall.Signal) {
	_ = unix.Kill(-j.pgid, s)
}

// terminate asks every process of the job to end: SIGTERM, and SIGCONT so that
// a stopped one sees it.
func (j *job) terminate() {
	j.signal(syscall.SIGTERM)
	j.signal(syscall.SIGCONT)
}

// alive reports whether a process of the job is left.
func (j *job) alive() bool {
	return !errors.Is(unix.Kill(-j.pgid, 0), unix.ESRCH)
}

// suspend is run when the leader stopped on the terminal (Ctrl-Z): dlock
// takes the terminal back and stops its own job, as the command did; once
// continued, it gives the terminal back when it is in the foreground again
// ("fg", not "bg") and continues the command.
func (j *job) suspend() {
	j.setForeground(unix.Getpgrp())
	stopJob()
	if inForeground(j.tty) {
		j.setForeground(j.pgid)
	}
	j.signal(syscall.SIGCONT)
}

// setForeground puts the process group pgid in the terminal's foreground.
func (j *job) setForeground(pgid int) {
	if j.tty == nil {
		return
	}
	// A background process changing the foreground gets SIGTTOU unless it
	// ignores it.
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	_ = unix.IoctlSetPointerInt(int(j.tty.Fd()), unix.TIOCSPGRP, pgid)
}

// closeTerminal gives the terminal back to dlock's group and closes it.
func (j *job) closeTerminal() {
	if j.tty == nil {
		return
	}
	j.setForeground(unix.Getpgrp())
	j.tty.Close()
	j.tty = nil
}

// drain stops what the command left running in its group after it ended:
// SIGTERM, then SIGKILL after grace. It returns whether anything was left.
func (j *job) drain(grace time.Duration) bool {
	if !j.alive() {
		return false
	}
	j.terminate()
	if j.waitGone(grace) {
		return true
	}
	j.signal(syscall.SIGKILL)
	j.waitGone(time.Second)
	return true
}

// waitGone polls until no process of the job is left or d has passed, and
// reports whether the job is gone. A process group's end is no event dlock can
// wait on.
func (j *job) waitGone(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for j.alive() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}
