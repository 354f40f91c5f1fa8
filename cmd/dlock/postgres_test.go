package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/jackc/pgx/v5"
)

// TestPostgresInspectionCreatesNothing runs the inspecting commands (status,
// list, unlock, list --watch) on a database without the lock table: status
// and unlock say "no dlock table", the lists are empty (exit 0), and none
// creates anything; run then creates the lock table and
// its sequence only; and the views show a plain lock's waiters, which
// PostgreSQL does not know, as "?".
func TestPostgresInspectionCreatesNothing(t *testing.T) {
	pg := testserver.StartPostgres(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tables := func() string {
		t.Helper()
		rows, err := conn.Query(ctx, `SELECT relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE nspname = 'public' AND relkind IN ('r', 'S') ORDER BY relname`)
		if err != nil {
			t.Fatal(err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(names, " ")
	}
	key := dlocktest.Key(t)
	for _, args := range [][]string{{"status", key}, {"unlock", "--force", key}} {
		r := dlockRun(t, append(args, "--postgres", pg.URL)...)
		if r.code != exitFailure || !strings.Contains(r.stderr, "no dlock table in PostgreSQL at ") {
			t.Errorf("%s on an empty database: exit %d, want %d saying no dlock table; %q", args[0], r.code, exitFailure, r.stderr)
		}
	}
	// Nothing was locked there: a list is empty.
	for _, tc := range []struct {
		args []string
		want string
	}{{[]string{"list", "--json"}, "[]\n"}, {[]string{"list", "--names"}, ""}} {
		r := dlockRun(t, append(tc.args, "--postgres", pg.URL)...)
		if r.code != exitOK || r.stdout != tc.want || r.stderr != "" {
			t.Errorf("%v on an empty database: exit %d, stdout %q, stderr %q; want 0 and %q", tc.args, r.code, r.stdout, r.stderr, tc.want)
		}
	}
	if r := dlockRun(t, "list", "--postgres", pg.URL); r.code != exitOK || strings.Contains(r.stdout+r.stderr, "table") {
		t.Errorf("list on an empty database: exit %d, stdout %q, stderr %q; want 0 and no locks", r.code, r.stdout, r.stderr)
	}
	watch := dlockCmd(t, "list", "--watch", "--interval", "200ms", "--postgres", pg.URL)
	var out string
	watch.Stdout = outFile(t, &out)
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "list --watch to show its first read", func() bool { return strings.Contains(readFile(out), "KEY") })
	_ = watch.Process.Signal(syscall.SIGINT)
	wait(t, watch, time.Now(), new(bytes.Buffer), new(bytes.Buffer))
	if s := readFile(out); strings.Contains(s, "read failed") {
		t.Errorf("list --watch on an empty database:\n%s", s)
	}
	if got := tables(); got != "" {
		t.Fatalf("inspection created %s", got)
	}

	if r := dlockRun(t, "run", "--postgres", pg.URL, key, "--", "true"); r.code != 0 {
		t.Fatalf("run: exit %d %s", r.code, r.stderr)
	}
	if got := tables(); got != "dlock_locks dlock_locks_token" {
		t.Errorf("run created %q, want the lock table and its sequence only", got)
	}

	holdWith(t, key, "--postgres", pg.URL, "--description", "on postgres")
	r := dlockRun(t, "list", "--postgres", pg.URL)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 {
		t.Fatalf("list: %q %s", r.stdout, r.stderr)
	}
	if i := strings.Index(lines[0], "WAITERS"); i < 0 || len(lines[1]) <= i || strings.Fields(lines[1][i:])[0] != "?" {
		t.Errorf("list does not show the waiters PostgreSQL does not know as \"?\":\n%s", r.stdout)
	}
	r = dlockRun(t, "status", "--postgres", pg.URL, key)
	if !strings.Contains(r.stdout, "waiters") || !strings.Contains(r.stdout, "? (not known") {
		t.Errorf("status does not say the waiters are unknown:\n%s", r.stdout)
	}
	url, _ := startServe(t, "--postgres", pg.URL)
	var j struct {
		Locks []struct {
			Waiters int `json:"waiters"`
		} `json:"locks"`
		WaitersUnknown int `json:"waiters_unknown"`
	}
	waitFor(t, "serve to show the lock", func() bool {
		resp, err := http.Get(url + "api/locks")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return json.NewDecoder(resp.Body).Decode(&j) == nil && len(j.Locks) == 1
	})
	if j.Locks[0].Waiters != -1 || j.WaitersUnknown != 1 {
		t.Errorf("serve: waiters %d (unknown locks %d), want -1 (1)", j.Locks[0].Waiters, j.WaitersUnknown)
	}
}

// TestPostgresFairAndSemaphore takes PostgreSQL's fair lock (--fair) and a
// semaphore (-n) through the CLI, which refused them before, and resizes the
// semaphore with dlock semaphore resize.
func TestPostgresFairAndSemaphore(t *testing.T) {
	pg := testserver.StartPostgres(t)
	sem, fair := dlocktest.Key(t)+".sem", dlocktest.Key(t)+".fair"
	if r := dlockRun(t, "run", "--fair", "--postgres", pg.URL, fair, "--", "true"); r.code != 0 {
		t.Errorf("run --fair: exit %d, stderr %q", r.code, r.stderr)
	}
	holdWith(t, sem, "-n", "1", "--postgres", pg.URL)
	if r := dlockRun(t, "run", "-n", "1", "--wait", "0", "--postgres", pg.URL, sem, "--", "true"); r.code != exitNotObtained {
		t.Errorf("a second run -n 1: exit %d, stderr %q; want %d", r.code, r.stderr, exitNotObtained)
	}
	if r := dlockRun(t, "semaphore", "resize", "--postgres", pg.URL, sem, "2"); r.code != 0 || !strings.Contains(r.stderr, "has 2 permits") {
		t.Fatalf("semaphore resize: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := dlockRun(t, "run", "-n", "2", "--wait", "0", "--postgres", pg.URL, sem, "--", "true"); r.code != 0 {
		t.Errorf("run -n 2 after a resize to 2: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := dlockRun(t, "run", "-s", "--postgres", pg.URL, sem, "--", "true"); r.code != exitUsage {
		t.Errorf("run -s: exit %d, want %d", r.code, exitUsage)
	}
}
