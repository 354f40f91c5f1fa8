package etcdlock

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testserver"
)

// TestUnansweredTryLockIsUnavailable: against an etcd that is down (killed) or
// hung (stopped with SIGSTOP), a TryLock with a context that never ends returns
// an error matching dlock.ErrUnavailable (not ErrNotObtained: nobody may hold
// the lock) within the request timeout, plus at most one more for the clean-up.
func TestUnansweredTryLockIsUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration // 0: the default
		fault   func(t *testing.T, e *testserver.Etcd)
	}{
		{"killed", time.Second, func(t *testing.T, e *testserver.Etcd) { e.Stop() }},
		{"hung", time.Second, stopProcess},
		{"hung-default", 0, stopProcess},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := testserver.StartEtcd(t)
			cli := newEtcd(t, e.Addr)
			var opts []Option
			if tc.timeout > 0 {
				opts = append(opts, WithRequestTimeout(tc.timeout))
			}
			d, err := NewDriver(cli, opts...)
			if err != nil {
				t.Fatal(err)
			}
			c, err := NewClient(d, dlock.WithTTL(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			key := testKey(t)
			l, err := c.TryLock(ctxT(t, 10*time.Second), key) // the connection is up
			if err != nil {
				t.Fatal(err)
			}
			_ = l.Unlock(ctxT(t, 10*time.Second))

			tc.fault(t, e)
			timeout := tc.timeout
			if timeout == 0 {
				timeout = DefaultRequestTimeout
			}
			bound := 2*timeout + time.Second // the attempt, its clean-up, slack
			type result struct {
				err  error
				took time.Duration
			}
			done := make(chan result, 1)
			start := time.Now()
			go func() {
				l, err := c.TryLock(context.Background(), key)
				if err == nil {
					_ = l.Unlock(context.Background())
				}
				done <- result{err, time.Since(start)}
			}()
			select {
			case r := <-done:
				t.Logf("TryLock returned after %v: %v", r.took.Round(time.Millisecond), r.err)
				if !errors.Is(r.err, dlock.ErrUnavailable) || errors.Is(r.err, dlock.ErrNotObtained) {
					t.Errorf("err %v, want ErrUnavailable and not ErrNotObtained", r.err)
				}
				if r.took > bound {
					t.Errorf("took %v, want at most %v", r.took, bound)
				}
			case <-time.After(bound + 30*time.Second):
				e.Stop() // lets the blocked call end, so that the client can close
				t.Fatalf("TryLock still blocked after %v", time.Since(start).Round(time.Millisecond))
			}
			e.Stop()
		})
	}
}

// stopProcess hangs e with SIGSTOP, and returns once the process has stopped
// (a signal is delivered asynchronously: a request sent at once could still be
// served); killing it at the end of the test ends it.
func stopProcess(t *testing.T, e *testserver.Etcd) {
	t.Helper()
	pid := e.PID()
	if err := e.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Signal(syscall.SIGCONT) })
	var ws syscall.WaitStatus
	for i := 0; ; i++ {
		_, err := syscall.Wait4(pid, &ws, syscall.WUNTRACED, nil)
		if err == syscall.EINTR && i < 10 {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		break
	}
	if !ws.Stopped() {
		t.Fatalf("etcd (pid %d) not stopped: wait status %v", pid, ws)
	}
}
