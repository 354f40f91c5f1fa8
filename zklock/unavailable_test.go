package zklock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testserver"
)

// TestUnansweredTryLockIsUnavailable: against a ZooKeeper that is down (killed)
// or hung (stopped with SIGSTOP), a TryLock with a context that never ends
// returns an error matching dlock.ErrUnavailable within the request timeout
// (plus the clean-up), not when the client gives the connection up (two thirds
// of the session timeout).
func TestUnansweredTryLockIsUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(t *testing.T, z *testserver.ZooKeeper)
	}{
		{"killed", func(t *testing.T, z *testserver.ZooKeeper) { z.Stop() }},
		{"hung", func(t *testing.T, z *testserver.ZooKeeper) {
			if err := z.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			waitStopped(t, z.PID())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			z := testserver.StartZooKeeper(t)
			d := newDriverAt(t, z.Addr, WithSessionTimeout(20*time.Second))
			c, err := NewClient(d, dlock.WithTTL(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			key := dlocktest.Key(t)
			l, err := c.TryLock(ctxT(t, 10*time.Second), key)
			if err != nil {
				t.Fatal(err)
			}
			_ = l.Unlock(ctxT(t, 10*time.Second))

			tc.fault(t, z)
			bound := DefaultRequestTimeout + 3*time.Second // the attempt, its clean-up (2s), slack
			done := make(chan error, 1)
			start := time.Now()
			go func() {
				l, err := c.TryLock(context.Background(), key)
				if err == nil {
					_ = l.Unlock(context.Background())
				}
				done <- err
			}()
			select {
			case err := <-done:
				took := time.Since(start)
				t.Logf("TryLock returned after %v: %v", took.Round(time.Millisecond), err)
				if !errors.Is(err, dlock.ErrUnavailable) || errors.Is(err, dlock.ErrNotObtained) {
					t.Errorf("err %v, want ErrUnavailable and not ErrNotObtained", err)
				}
				if took > bound {
					t.Errorf("took %v, want at most %v", took.Round(time.Millisecond), bound)
				}
			case <-time.After(bound + 30*time.Second):
				t.Errorf("TryLock still blocked after %v", time.Since(start).Round(time.Millisecond))
				z.Stop() // ends the blocked call
				<-done
			}
			z.Stop() // a hung server would hold up the driver's Close
		})
	}
}

// waitStopped waits until every thread of process pid is stopped: a signal
// stops them one by one, and a request the server answers in the meantime
// would find it running.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
		if err != nil || len(tasks) == 0 {
			t.Fatalf("threads of %d: %v", pid, err)
		}
		stopped := true
		for _, f := range tasks {
			b, err := os.ReadFile(f)
			i := bytes.LastIndexByte(b, ')')
			if err == nil && i >= 0 && i+2 < len(b) && b[i+2] != 'T' && b[i+2] != 't' {
				stopped = false
			}
		}
		if stopped {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("process %d not stopped after SIGSTOP", pid)
		}
	}
}
