package zklock

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// Helper processes: the test binary run again with DLOCK_ZKLOCK_HELPER set to a
// role, talking to the server at DLOCK_ZKLOCK_ADDR about the lock
// DLOCK_ZKLOCK_KEY, with a session timeout of helperSession. A helper reports on
// stdout, one line per event.
const helperSession = time.Second

// helperMain runs this test binary as a helper process when the environment
// asks for one, and reports whether it did.
func helperMain() bool {
	role := os.Getenv("DLOCK_ZKLOCK_HELPER")
	if role == "" {
		return false
	}
	if err := runHelper(role, os.Getenv("DLOCK_ZKLOCK_ADDR"), os.Getenv("DLOCK_ZKLOCK_KEY")); err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	return true
}

func runHelper(role, addr, key string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	session := helperSession
	if ms, err := strconv.Atoi(os.Getenv("DLOCK_ZKLOCK_SESSION_MS")); err == nil {
		session = time.Duration(ms) * time.Millisecond
	}
	d, err := NewDriver(ctx, []string{addr}, WithSessionTimeout(session))
	if err != nil {
		return err
	}
	defer d.Close()
	switch role {
	case "waiter":
		// Queue a node behind the holder and wait until killed.
		_, err := d.acquire(ctx, key, "waiter", d.SessionTimeout(), "", true)
		if !errors.Is(err, dlock.ErrNotObtained) {
			return fmt.Errorf("waiter: %v", err)
		}
		fmt.Println("queued")
		<-ctx.Done()
		return nil
	case "ttlholder":
		// Hold the lock with the TTL DLOCK_ZKLOCK_TTL_MS, renewed, until killed.
		ms, _ := strconv.Atoi(os.Getenv("DLOCK_ZKLOCK_TTL_MS"))
		c, err := NewClient(d, dlock.WithTTL(time.Duration(ms)*time.Millisecond), dlock.WithAutoRenew(true))
		if err != nil {
			return err
		}
		l, err := c.Lock(ctx, key)
		if err != nil {
			return err
		}
		fmt.Println("held", l.Token())
		<-l.Done()
		return l.Err()
	case "holder":
		// Hold the lock with renewals, and report its loss.
		c, err := NewClient(d, dlock.WithTTL(d.SessionTimeout()))
		if err != nil {
			return err
		}
		l, err := c.Lock(ctx, key, dlock.WithAutoRenew(true))
		if err != nil {
			return err
		}
		fmt.Println("held", l.Token())
		select {
		case <-l.Done():
		case <-ctx.Done():
			return ctx.Err()
		}
		fmt.Println("lost", l.Deadline().UnixNano(), time.Now().UnixNano(), errors.Is(l.Err(), dlock.ErrLockLost))
		return nil
	}
	return fmt.Errorf("unknown role %q", role)
}

// helper is a running helper process.
type helper struct {
	cmd   *exec.Cmd
	lines chan string
}

// startHelper starts a helper process in role for key, with env (KEY=VALUE
// pairs) added to its environment; it is killed when the test ends.
func startHelper(t *testing.T, role, key string, env ...string) *helper {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), "DLOCK_ZKLOCK_HELPER="+role, "DLOCK_ZKLOCK_ADDR="+srv.Addr, "DLOCK_ZKLOCK_KEY="+key), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helper{cmd: cmd, lines: make(chan string, 16)}
	go func() {
		defer close(h.lines)
		s := bufio.NewScanner(out)
		for s.Scan() {
			h.lines <- s.Text()
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		for range h.lines {
		}
	})
	return h
}

// expect waits for the helper's next line, which must start with prefix, and
// returns its fields after the prefix.
func (h *helper) expect(t *testing.T, prefix string, within time.Duration) []string {
	t.Helper()
	select {
	case line, ok := <-h.lines:
		if !ok {
			t.Fatalf("helper exited before %q", prefix)
		}
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != prefix {
			t.Fatalf("helper said %q, want %q", line, prefix)
		}
		return f[1:]
	case <-time.After(within):
		t.Fatalf("helper did not say %q within %v", prefix, within)
	}
	return nil
}
