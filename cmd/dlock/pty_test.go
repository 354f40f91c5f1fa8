package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
)

// terminal is a dlock process whose stderr is a pseudo-terminal.
type terminal struct {
	t      *testing.T
	cmd    *exec.Cmd
	ptmx   *os.File
	mu     sync.Mutex
	out    bytes.Buffer
	more   chan struct{} // signalled after each read
	closed chan struct{} // closed when the terminal has no writer left
}

// ptyColumns is the width of the test terminals.
const ptyColumns = 80

// withControllingTerminal makes the terminal the process's stdin and its
// controlling terminal, with the process leading the foreground group.
const withControllingTerminal = 1

// ptyStart starts cmd with its stderr on a pseudo-terminal and collects what
// it writes there.
func ptyStart(t *testing.T, cmd *exec.Cmd, mode int) *terminal {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ptmx.Close() })
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 24, Cols: ptyColumns}); err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = tty
	if mode == withControllingTerminal {
		cmd.Stdin = tty
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	}
	if err := cmd.Start(); err != nil {
		tty.Close()
		t.Fatal(err)
	}
	tty.Close()
	term := &terminal{t: t, cmd: cmd, ptmx: ptmx, more: make(chan struct{}, 1), closed: make(chan struct{})}
	go func() {
		defer close(term.closed)
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			term.mu.Lock()
			term.out.Write(buf[:n])
			term.mu.Unlock()
			select {
			case term.more <- struct{}{}:
			default:
			}
			if err != nil {
				return // EIO once the process and its children closed the terminal
			}
		}
	}()
	return term
}

// write types s on the terminal.
func (term *terminal) write(s string) {
	term.t.Helper()
	if _, err := term.ptmx.WriteString(s); err != nil {
		term.t.Fatal(err)
	}
}

func (term *terminal) text() string {
	term.mu.Lock()
	defer term.mu.Unlock()
	return term.out.String()
}

// waitFor waits until the terminal shows s.
func (term *terminal) waitFor(s string) {
	term.t.Helper()
	deadline := time.After(10 * time.Second)
	for !strings.Contains(term.text(), s) {
		select {
		case <-term.more:
		case <-term.closed:
			term.t.Fatalf("terminal closed without showing %q: %q", s, term.text())
		case <-deadline:
			term.t.Fatalf("terminal did not show %q within 10s: %q", s, term.text())
		}
	}
}

// finish waits for the process to end and its output to be read.
func (term *terminal) finish() {
	term.t.Helper()
	done := make(chan error, 1)
	go func() { done <- term.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = term.cmd.Process.Kill()
		<-done
		term.t.Fatalf("process did not end within 30s: %q", term.text())
	}
	select {
	case <-term.closed:
	case <-time.After(5 * time.Second):
		term.t.Fatalf("terminal output not closed: %q", term.text())
	}
}
