package pglock

// Fault tests against a real PostgreSQL: the holder's backend connections
// terminated, the server restarted while a lock is held and waited for, a
// holder process stopped (SIGSTOP) past its TTL. Each logs one FIGURES line.

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
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// holderEnv makes the test binary a holder process (see holderMain) instead of
// running the tests.
const holderEnv = "PGLOCK_TEST_HOLDER"

// holderMain is a holder process: it takes KEY at URL with a TTL of TTL_MS,
// renewed, says "locked TOKEN", and then answers each line of its stdin:
// "state" with "state LOST DEADLINE_UNIX_NANOS", and "write" with the outcome
// of a fenced insert into the table TABLE: "write ok" or "write refused
// STALE".
func holderMain() int {
	if err := holder(os.Stdin, os.Stdout); err != nil {
		fmt.Println("error", strings.ReplaceAll(err.Error(), "\n", " "))
		return 1
	}
	return 0
}

func holder(in io.Reader, out io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, os.Getenv("URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	d, err := NewDriver(pool)
	if err != nil {
		return err
	}
	ms, _ := strconv.Atoi(os.Getenv("TTL_MS"))
	c, err := NewClient(d, dlock.WithTTL(time.Duration(ms)*time.Millisecond), dlock.WithAutoRenew(true))
	if err != nil {
		return err
	}
	lease, err := c.TryLock(ctx, os.Getenv("KEY"))
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "locked", lease.Token())
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		switch sc.Text() {
		case "state":
			fmt.Fprintln(out, "state", lease.Err() != nil, lease.Deadline().UnixNano())
		case "write":
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, "INSERT INTO "+os.Getenv("TABLE")+" VALUES (1, $1)", int64(lease.Token())); err != nil {
					return err
				}
				return d.Fence(ctx, tx, lease)
			})
			switch {
			case err == nil:
				fmt.Fprintln(out, "write ok")
			case errors.Is(err, dlock.ErrNotHeld):
				fmt.Fprintln(out, "write refused", errors.Is(err, dlock.ErrStaleToken))
			default:
				return err
			}
		}
	}
	return nil
}

// holderProc is a running holder process.
type holderProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines <-chan []string
}

func startHolder(t *testing.T, env ...string) *holderProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), holderEnv+"=1"), env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan []string, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- strings.Fields(sc.Text())
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = stdin.Close()
		_ = cmd.Process.Kill()
		<-done
		_ = cmd.Wait()
	})
	return &holderProc{cmd: cmd, stdin: stdin, lines: lines}
}

// ask sends cmd (unless empty) and returns the fields after the word want of
// the process's next line.
func (h *holderProc) ask(t *testing.T, cmd, want string) []string {
	t.Helper()
	if cmd != "" {
		if _, err := fmt.Fprintln(h.stdin, cmd); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case f, ok := <-h.lines:
		if !ok || len(f) == 0 || f[0] != want {
			t.Fatalf("holder process answered %v to %q, want %q", f, cmd, want)
		}
		return f[1:]
	case <-time.After(20 * time.Second):
		t.Fatalf("holder process said nothing to %q", cmd)
	}
	return nil
}

// faultServer starts a PostgreSQL of its own for a test that breaks it.
func faultServer(t *testing.T) *testserver.Postgres {
	t.Helper()
	p := testserver.StartPostgres(t)
	d, err := NewDriver(newPoolURL(t, p.URL))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(ctxT(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	return p
}

// A holder process stopped past its TTL: the next holder gets in once the
// lease has expired by the database's clock, after the stopped holder's local
// deadline; the resumed holder is told of the loss, and its fenced write is
// refused.
func TestFaultHolderProcessStoppedPastItsTTL(t *testing.T) {
	const ttl = time.Second
	table := fenceTable(t)
	key := dlocktest.Key(t)
	h := startHolder(t, "URL="+srv.URL, "KEY="+key, "TTL_MS="+strconv.Itoa(int(ttl/time.Millisecond)), "TABLE="+table)
	oldToken, _ := strconv.ParseUint(h.ask(t, "", "locked")[0], 10, 64)
	if w := h.ask(t, "write", "write"); w[0] != "ok" {
		t.Fatalf("the holder's fenced write before the pause: %v", w)
	}
	if err := h.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	next := newClient(t)
	ctx := ctxT(t, 30*time.Second)
	lease, err := next.Lock(ctx, key, dlock.WithWait(15*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := time.Now()
	if lease.Token() <= oldToken {
		t.Fatalf("next token %d not above the stopped holder's %d", lease.Token(), oldToken)
	}
	if err := h.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	st := h.ask(t, "state", "state")
	deadline, _ := strconv.ParseInt(st[1], 10, 64)
	if st[0] != "true" {
		t.Errorf("the resumed holder was not told of its loss")
	}
	if d := time.Unix(0, deadline); !d.Before(got) {
		t.Errorf("the stopped holder's deadline %v after the next holder's grant", d.Sub(got))
	}
	w := h.ask(t, "write", "write")
	if w[0] != "refused" || w[1] != "true" {
		t.Fatalf("the resumed holder's fenced write: %v, want refused with a stale token", w)
	}
	if n := countRows(t, table); n != 1 {
		t.Fatalf("%d rows, want the one written before the pause", n)
	}
	_ = lease.Unlock(ctx)
	t.Logf("FIGURES ttl=%v stop-to-next-grant=%v old-deadline-before-grant-by=%v old-token=%d new-token=%d stale-write=refused",
		ttl, got.Sub(stopped).Round(time.Millisecond), got.Sub(time.Unix(0, deadline)).Round(time.Millisecond), oldToken, lease.Token())
}

// The holder's backend connections terminated over and over: the lease lives
// on (its renewals take new connections), nobody else gets in, and a fenced
// transaction whose connection is killed commits nothing.
func TestFaultHolderConnectionsTerminated(t *testing.T) {
	cfg, err := pgxpool.ParseConfig(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	app := "pglock-holder-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	ctx := ctxT(t, 60*time.Second)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	d, _ := NewDriver(pool)
	c, _ := NewClient(d)
	key := dlocktest.Key(t)
	const ttl = 2 * time.Second
	lease, err := c.TryLock(ctx, key, dlock.WithTTL(ttl), dlock.WithAutoRenew(true))
	if err != nil {
		t.Fatal(err)
	}
	other := newClient(t)
	kill := newPool(t)
	killed := 0
	start := time.Now()
	for time.Since(start) < 3*ttl {
		var n int
		if err := kill.QueryRow(ctx, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&n); err != nil {
			t.Fatal(err)
		}
		killed += n
		if _, err := other.TryLock(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("TryLock while the holder's connections are being killed: %v", err)
		}
		select {
		case <-lease.Done():
			t.Fatalf("lease lost after %d terminated connections: %v", killed, lease.Err())
		case <-time.After(ttl / 5):
		}
	}
	// A fenced transaction whose connection dies before its commit.
	table := fenceTable(t)
	pool.Reset() // the test's own transaction starts on a live connection
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Fence(ctx, tx, lease); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO "+table+" VALUES (1, 1)"); err != nil {
		t.Fatal(err)
	}
	admin(t, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", app)
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("commit on a terminated connection succeeded")
	}
	if n := countRows(t, table); n != 0 {
		t.Fatalf("%d rows from a transaction whose connection was killed", n)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatalf("Unlock after the connections were killed: %v", err)
	}
	t.Logf("FIGURES ttl=%v connections-terminated=%d over %v lease=kept others-refused=all", ttl, killed, time.Since(start).Round(time.Millisecond))
}

// A pooled connection the server closed while it was idle (terminated by an
// administrator) costs a request nothing: the request runs again on a fresh
// connection.
func TestFaultIdleConnectionTerminatedIsRetried(t *testing.T) {
	app := "pglock-idle-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	pool := newPoolURL(t, srv.URL+"&pool_max_conns=1&application_name="+app)
	d, _ := NewDriver(pool)
	ctx := ctxT(t, 20*time.Second)
	key := dlocktest.Key(t)
	h := driver.Holding{Key: key, Owner: "o", TTL: time.Minute}
	for i, op := range []func() error{
		func() error {
			_, err := d.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: "o", TTL: time.Minute})
			return err
		},
		func() error { _, err := d.Extend(ctx, h, time.Minute); return err },
		func() error { return d.Release(ctx, h) },
	} {
		admin(t, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", app)
		if err := op(); err != nil {
			t.Fatalf("operation %d after its idle connection was terminated: %v", i, err)
		}
	}
}

// The server restarted (immediate shutdown, crash recovery) while a lock is
// held and waited for: the holding survives, the waiter does not get in while
// the holder holds, gets in soon after the release, and tokens go on
// increasing.
func TestFaultServerRestartWhileHeldAndWaited(t *testing.T) {
	p := faultServer(t)
	ctx := ctxT(t, 90*time.Second)
	newC := func() (*Client, *Driver) {
		d, err := NewDriver(newPoolURL(t, p.URL+"&connect_timeout=2"))
		if err != nil {
			t.Fatal(err)
		}
		c, _ := NewClient(d)
		return c, d
	}
	holderC, _ := newC()
	waiterC, waiterD := newC()
	key := dlocktest.Key(t)
	const ttl = 5 * time.Second
	lease, err := holderC.TryLock(ctx, key, dlock.WithTTL(ttl), dlock.WithAutoRenew(true))
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l  *dlock.Lease
		at time.Time
	}
	got := make(chan result, 1)
	go func() {
		l, err := waiterC.Lock(ctx, key, dlock.WithWait(60*time.Second), dlock.WithTTL(ttl))
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		got <- result{l, time.Now()}
	}()
	subscribed(t, waiterD, 1) // the waiter found the lock held and listens
	// Down for a while (the outage is the fault under test), then back with
	// its data after crash recovery.
	restartStart := time.Now()
	p.Stop()
	time.Sleep(ttl / 3)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Since(restartStart)
	// Hold on across a few renewals after the restart.
	select {
	case <-got:
		t.Fatalf("waiter got the lock while the holder held it (holder err %v)", lease.Err())
	case <-lease.Done():
		t.Fatalf("holder lost its lease over a restart of %v: %v", restarted, lease.Err())
	case <-time.After(ttl):
	}
	released := time.Now()
	if err := lease.Unlock(ctx); err != nil {
		t.Fatalf("Unlock after the restart: %v", err)
	}
	select {
	case r := <-got:
		if r.l == nil {
			t.Fatal("waiter failed")
		}
		handover := r.at.Sub(released)
		if handover > ttl {
			t.Errorf("waiter got the lock %v after the release", handover)
		}
		if r.l.Token() <= lease.Token() {
			t.Fatalf("token after the restart %d not above %d", r.l.Token(), lease.Token())
		}
		_ = r.l.Unlock(ctx)
		t.Logf("FIGURES ttl=%v outage=%v holding=kept release-to-waiter=%v old-token=%d new-token=%d",
			ttl, restarted.Round(time.Millisecond), handover.Round(time.Millisecond), lease.Token(), r.l.Token())
	case <-time.After(30 * time.Second):
		t.Fatal("waiter never got the lock after the release")
	}
}
