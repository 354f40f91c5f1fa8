package dlock_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// logRecorder is a slog.Handler that keeps the records whose message starts
// with prefix and announces each on a channel.
type logRecorder struct {
	prefix string
	mu     sync.Mutex
	msgs   []string
	seen   chan string
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler      { return r }
func (r *logRecorder) WithGroup(string) slog.Handler           { return r }

func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	if !strings.HasPrefix(rec.Message, r.prefix) {
		return nil
	}
	line := rec.Message
	rec.Attrs(func(a slog.Attr) bool {
		line += " " + a.Key + "=" + a.Value.String()
		return true
	})
	r.mu.Lock()
	r.msgs = append(r.msgs, line)
	r.mu.Unlock()
	select {
	case r.seen <- line:
	default:
	}
	return nil
}

func (r *logRecorder) lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.msgs...)
}

// recordWaitLogs makes slog.Default record the wait loop's failure lines for
// the rest of the test.
func recordWaitLogs(t *testing.T) *logRecorder {
	rec := &logRecorder{prefix: "dlock: waiting", seen: make(chan string, 1)}
	old := slog.Default()
	slog.SetDefault(slog.New(rec))
	t.Cleanup(func() { slog.SetDefault(old) })
	return rec
}

// failingLocker returns a locker on a redis-server of the test's own, its
// admin connection, and the server.
func failingLocker(t *testing.T, ropts *redis.Options, opts ...dlock.Option) (*redislock.Client, *redis.Client, *testserver.Redis) {
	t.Helper()
	srv := testserver.StartRedis(t)
	o := *ropts
	o.Addr = srv.Addr
	rdb := redis.NewClient(&o)
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := redislock.New(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = admin.Close() })
	return c, admin, srv
}

func outOfMemory(t *testing.T, admin *redis.Client) {
	t.Helper()
	ctx := context.Background()
	if err := admin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
}

// lockNoDeadline runs Lock on a context without a deadline and returns its
// result and duration; a Lock still waiting after guard is cancelled (and the
// test fails) so that a regression cannot hang the test binary.
func lockNoDeadline(t *testing.T, c dlock.Locker, key string, guard time.Duration, opts ...dlock.Option) (time.Duration, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := time.AfterFunc(guard, cancel)
	defer stop.Stop()
	start := time.Now()
	l, err := c.Lock(ctx, key, opts...)
	took := time.Since(start)
	if err == nil {
		_ = l.Unlock(context.Background())
		t.Fatalf("Lock obtained the lock from a failing backend after %v", took)
	}
	if errors.Is(err, context.Canceled) {
		t.Fatalf("Lock without a deadline still waiting after %v: %v", took, err)
	}
	return took, err
}

// checkFailureLimitError checks the error of a wait that ran out of its
// failure limit: the backend's failure, on one line, and nothing else.
func checkFailureLimitError(t *testing.T, err error, reason string) {
	t.Helper()
	if !errors.Is(err, dlock.ErrUnavailable) || errors.Is(err, dlock.ErrNotObtained) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		t.Fatalf("error %v: want ErrUnavailable only", err)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("error on more than one line: %q", err)
	}
	if !strings.Contains(err.Error(), reason) {
		t.Errorf("error %q does not name the server's reason %q", err, reason)
	}
	if !strings.Contains(err.Error(), "failure limit") {
		t.Errorf("error %q does not say the failure limit ended the wait", err)
	}
}

// A waiting Lock whose context has no deadline, on a backend that fails every
// attempt, gives up after the failure limit with the backend's reason instead
// of waiting forever, and says once, through slog, what it is waiting through.
func TestLockGivesUpAfterFailureLimit(t *testing.T) {
	const limit = 300 * time.Millisecond
	ropts := &redis.Options{ContextTimeoutEnabled: true, MaxRetries: -1}

	t.Run("out of memory", func(t *testing.T) {
		rec := recordWaitLogs(t)
		c, admin, _ := failingLocker(t, ropts)
		outOfMemory(t, admin)
		key := dlocktest.Key(t)
		took, err := lockNoDeadline(t, c, key, 20*time.Second, dlock.WithFailureLimit(limit))
		checkFailureLimitError(t, err, "OOM")
		if took < limit || took > limit+3*time.Second {
			t.Errorf("gave up after %v, failure limit %v", took, limit)
		}
		lines := rec.lines()
		if len(lines) != 1 {
			t.Fatalf("logged %d lines, want 1: %q", len(lines), lines)
		}
		for _, want := range []string{"OOM", key, "failure_limit=" + limit.String()} {
			if !strings.Contains(lines[0], want) {
				t.Errorf("log line %q does not name %q", lines[0], want)
			}
		}
	})

	t.Run("killed", func(t *testing.T) {
		rec := recordWaitLogs(t)
		c, _, srv := failingLocker(t, ropts)
		srv.Stop()
		took, err := lockNoDeadline(t, c, dlocktest.Key(t), 20*time.Second, dlock.WithFailureLimit(limit))
		checkFailureLimitError(t, err, "connection refused")
		if took < limit || took > limit+3*time.Second {
			t.Errorf("gave up after %v, failure limit %v", took, limit)
		}
		// The first failure may take the whole limit (the client's dial
		// retries): the wait then gives up without logging.
		if n := len(rec.lines()); n > 1 {
			t.Errorf("logged %d lines, want at most 1: %q", n, rec.lines())
		}
	})

	t.Run("unreachable", func(t *testing.T) {
		port, err := testserver.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		o := *ropts
		o.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		rdb := redis.NewClient(&o)
		defer rdb.Close()
		c, err := redislock.New(rdb, dlock.WithFailureLimit(limit)) // as a Client default
		if err != nil {
			t.Fatal(err)
		}
		took, err := lockNoDeadline(t, c, dlocktest.Key(t), 20*time.Second)
		checkFailureLimitError(t, err, "connection refused")
		if took < limit || took > limit+3*time.Second {
			t.Errorf("gave up after %v, failure limit %v", took, limit)
		}
		// Do, LockAll and Campaign wait the same way.
		ctx := context.Background()
		err = dlock.Do(ctx, c, "k", func(context.Context) error { return nil })
		checkFailureLimitError(t, err, "connection refused")
		_, err = dlock.LockAll(ctx, c, []string{"a", "b"})
		checkFailureLimitError(t, err, "connection refused")
		_, err = dlock.Campaign(ctx, c, "role")
		checkFailureLimitError(t, err, "connection refused")
	})

	t.Run("hung", func(t *testing.T) {
		// Every attempt ends at the client's read timeout: the wait gives up at
		// the first one that ends past the limit.
		o := *ropts
		o.ReadTimeout, o.WriteTimeout = 100*time.Millisecond, 100*time.Millisecond
		c, _, srv := failingLocker(t, &o)
		if err := srv.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = srv.Signal(syscall.SIGCONT) }()
		took, err := lockNoDeadline(t, c, dlocktest.Key(t), 20*time.Second, dlock.WithFailureLimit(limit))
		checkFailureLimitError(t, err, "timeout")
		if took < limit || took > limit+4*time.Second {
			t.Errorf("gave up after %v, failure limit %v", took, limit)
		}
	})
}

// Replies saying the lock is held are not failures: a wait on a held lock is not
// ended by the failure limit, however short, and a wait that meets a failure
// shorter than its limit rides it out and obtains the lock.
func TestFailureLimitCountsOnlyFailures(t *testing.T) {
	ropts := &redis.Options{ContextTimeoutEnabled: true, MaxRetries: -1}

	t.Run("held", func(t *testing.T) {
		c, _, _ := failingLocker(t, ropts)
		ctx := context.Background()
		key := dlocktest.Key(t)
		holder, err := c.Lock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		defer unlockLease(t, holder)
		start := time.Now()
		_, err = c.Lock(ctx, key, dlock.WithFailureLimit(time.Millisecond), dlock.WithWait(500*time.Millisecond))
		if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("wait on a held lock: %v, want ErrNotObtained at the wait's end", err)
		}
		if took := time.Since(start); took < 500*time.Millisecond {
			t.Errorf("gave up after %v, before the wait's end", took)
		}
	})

	t.Run("short outage", func(t *testing.T) {
		rec := recordWaitLogs(t)
		c, admin, _ := failingLocker(t, ropts)
		outOfMemory(t, admin)
		done := make(chan error, 1)
		go func() {
			l, err := c.Lock(context.Background(), dlocktest.Key(t), dlock.WithFailureLimit(10*time.Second))
			if err == nil {
				err = l.Unlock(context.Background())
			}
			done <- err
		}()
		select {
		case <-rec.seen: // the waiter met the refusal
		case err := <-done:
			t.Fatalf("Lock ended before the outage did: %v", err)
		case <-time.After(10 * time.Second):
			t.Fatal("no failure logged")
		}
		if err := admin.ConfigSet(context.Background(), "maxmemory", "0").Err(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("Lock across a short out-of-memory spell: %v", err)
		}
	})
}

func TestFailureLimitRejected(t *testing.T) {
	c := newRedisLocker(t)
	ctx := context.Background()
	for _, d := range []time.Duration{0, -time.Second} {
		if _, err := c.Lock(ctx, "k", dlock.WithFailureLimit(d)); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("WithFailureLimit(%v): %v, want ErrInvalid", d, err)
		}
		rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
		_, err := redislock.New(rdb, dlock.WithFailureLimit(d))
		_ = rdb.Close()
		if !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("client default WithFailureLimit(%v): %v, want ErrInvalid", d, err)
		}
		if _, err := dlock.LockAll(ctx, c, []string{"k"}, dlock.WithFailureLimit(d)); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("LockAll WithFailureLimit(%v): %v, want ErrInvalid", d, err)
		}
	}
}
