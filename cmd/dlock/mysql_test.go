package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testserver"
	_ "github.com/go-sql-driver/mysql"
)

// TestMySQL runs the commands on MariaDB (--mysql and DLOCK_MYSQL): the
// inspecting ones create nothing in a database without the lock table; run
// takes and releases, a held lock shows in status, list and serve, unlock
// --force loses the holder's lease at once; the fair lock excludes;
// semaphores resize; latches and
// barriers work; dlock verify passes and leaves nothing under its prefix; a
// wrong password is refused without being shown.
func TestMySQL(t *testing.T) {
	m := testserver.StartMariaDB(t)
	db, err := sql.Open("mysql", m.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	tables := func() string {
		t.Helper()
		rows, err := db.QueryContext(ctx, "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() ORDER BY table_name")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var names []string
		for rows.Next() {
			var n string
			_ = rows.Scan(&n)
			names = append(names, n)
		}
		return strings.Join(names, " ")
	}
	key := dlocktest.Key(t)

	t.Run("InspectionCreatesNothing", func(t *testing.T) {
		for _, args := range [][]string{{"status", key}, {"unlock", "--force", key}} {
			r := dlockRun(t, append(args, "--mysql", m.DSN)...)
			if r.code != exitFailure || !strings.Contains(r.stderr, "no dlock table in MySQL at ") {
				t.Errorf("%s on an empty database: exit %d, want %d saying no dlock table; %q", args[0], r.code, exitFailure, r.stderr)
			}
		}
		if r := dlockRun(t, "list", "--json", "--mysql", m.DSN); r.code != exitOK || r.stdout != "[]\n" {
			t.Errorf("list on an empty database: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		if got := tables(); got != "" {
			t.Fatalf("inspection created %s", got)
		}
	})

	t.Run("RunStatusListUnlock", func(t *testing.T) {
		r := dlockRun(t, "run", "--mysql", m.DSN, key, "--", "sh", "-c", `test -n "$DLOCK_TOKEN" && echo "$DLOCK_KEY"`)
		if r.code != 0 || strings.TrimSpace(r.stdout) != key {
			t.Fatalf("run: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		if got := tables(); got != "dlock_locks dlock_locks_fair dlock_locks_sem dlock_locks_sync" {
			t.Errorf("run created %q", got)
		}
		holder, stderr, _ := startHolder(t, []string{"--mysql", m.DSN, "--ttl", "30s", "--description", "on mariadb"}, key, `echo ok > "$1"; exec sleep 60`)
		r = dlockRun(t, "status", "--mysql", m.DSN, key)
		if r.code != 0 || !strings.Contains(r.stdout, "held") || !strings.Contains(r.stdout, "on mariadb") {
			t.Errorf("status of a held lock: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		r = dlockRun(t, "list", "--mysql", m.DSN, "--names", key[:len(key)-4]+"*")
		if r.stdout != key+"\n" {
			t.Errorf("list --names: %q %s", r.stdout, r.stderr)
		}
		if r = dlockRun(t, "run", "--mysql", m.DSN, "--wait", "0", key, "--", "true"); r.code != exitNotObtained {
			t.Errorf("run --wait 0 on a held lock: exit %d, want %d; %s", r.code, exitNotObtained, r.stderr)
		}
		url, _ := startServe(t, "--mysql", m.DSN)
		var j struct {
			Locks []struct {
				Key string `json:"key"`
			} `json:"locks"`
		}
		waitFor(t, "serve to show the lock", func() bool {
			resp, err := http.Get(url + "api/locks")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			return json.NewDecoder(resp.Body).Decode(&j) == nil && len(j.Locks) == 1 && j.Locks[0].Key == key
		})
		cmd := dlockCmd(t, "unlock", "--force", key)
		cmd.Env = append(cmd.Env, "DLOCK_MYSQL="+m.DSN)
		for i, kv := range cmd.Env { // the server comes from DLOCK_MYSQL, not DLOCK_REDIS
			if strings.HasPrefix(kv, "DLOCK_REDIS=") {
				cmd.Env[i] = "DLOCK_REDIS="
			}
		}
		forced := time.Now()
		if r = runCmd(t, cmd); r.code != 0 {
			t.Errorf("unlock --force: exit %d; %s", r.code, r.stderr)
		}
		done := make(chan error, 1)
		go func() { done <- holder.Wait() }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("the holder did not notice the forced unlock")
		}
		// Told at once: long before the 30 s lease's first renewal.
		if took := time.Since(forced); took > 5*time.Second {
			t.Errorf("the holder stopped %v after unlock --force", took)
		}
		if code := holder.ProcessState.ExitCode(); code != exitLockLost {
			t.Errorf("holder after unlock --force: exit %d, want %d; %s", code, exitLockLost, stderr)
		}
		if r = dlockRun(t, "status", "--mysql", m.DSN, key); r.code != exitFailure {
			t.Errorf("status of a free lock: exit %d, want %d", r.code, exitFailure)
		}
		if r = dlockRun(t, "run", "--mysql", "127.0.0.1:1", key, "--", "true"); r.code != exitUnavailable {
			t.Errorf("run on a closed port: exit %d, want %d; %s", r.code, exitUnavailable, r.stderr)
		}
		if r = dlockRun(t, "run", "--mysql", m.DSN, "-s", key, "--", "true"); r.code != exitUsage || !strings.Contains(r.stderr, "no read-write lock") {
			t.Errorf("run -s: exit %d, want %d; %s", r.code, exitUsage, r.stderr)
		}
	})

	t.Run("Semaphore", func(t *testing.T) {
		sem := dlocktest.Key(t) + ".sem"
		holdWith(t, sem, "-n", "1", "--mysql", m.DSN)
		if r := dlockRun(t, "run", "-n", "1", "--wait", "0", "--mysql", m.DSN, sem, "--", "true"); r.code != exitNotObtained {
			t.Errorf("a second run -n 1: exit %d, stderr %q; want %d", r.code, r.stderr, exitNotObtained)
		}
		if r := dlockRun(t, "semaphore", "resize", "--mysql", m.DSN, sem, "2"); r.code != 0 || !strings.Contains(r.stderr, "has 2 permits") {
			t.Fatalf("semaphore resize: exit %d, stderr %q", r.code, r.stderr)
		}
		if r := dlockRun(t, "run", "-n", "2", "--wait", "0", "--mysql", m.DSN, sem, "--", "true"); r.code != 0 {
			t.Errorf("run -n 2 after a resize to 2: exit %d, stderr %q", r.code, r.stderr)
		}
	})

	t.Run("Fair", func(t *testing.T) {
		fair := dlocktest.Key(t) + ".fair"
		if r := dlockRun(t, "run", "--fair", "--mysql", m.DSN, fair, "--", "true"); r.code != 0 {
			t.Fatalf("run --fair: exit %d, stderr %q", r.code, r.stderr)
		}
		holdWith(t, fair, "--fair", "--mysql", m.DSN)
		if r := dlockRun(t, "run", "--fair", "--wait", "0", "--mysql", m.DSN, fair, "--", "true"); r.code != exitNotObtained {
			t.Errorf("a second run --fair: exit %d, stderr %q; want %d", r.code, r.stderr, exitNotObtained)
		}
	})

	t.Run("LatchAndBarrier", func(t *testing.T) {
		name := syncName(t)
		if r := dlockRun(t, "latch", "count-down", "--mysql", m.DSN, "--count", "1", name); r.code != 0 || strings.TrimSpace(r.stdout) != "0" {
			t.Fatalf("count-down: %+v", r)
		}
		if r := dlockRun(t, "latch", "wait", "--mysql", m.DSN, "--count", "1", "--timeout", "10s", name); r.code != 0 {
			t.Fatalf("wait: %+v", r)
		}
		if r := dlockRun(t, "barrier", "--mysql", m.DSN, "--parties", "1", "--timeout", "10s", name, "--", "true"); r.code != 0 {
			t.Fatalf("barrier: %+v", r)
		}
	})

	t.Run("Verify", func(t *testing.T) {
		r := dlockRun(t, "verify", "--prefix", "vt-", "--duration", "4s", "--ttl", "1s", "--mysql", m.DSN)
		if r.code != exitOK || !strings.Contains(r.stdout, "every property holds") || !strings.Contains(r.stdout, "faults: stop,kill,reset,delay") {
			t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
		}
		var left int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM dlock_locks WHERE lock_key LIKE 'vt-%'").Scan(&left); err != nil || left != 0 {
			t.Errorf("left under the prefix: %d rows, %v", left, err)
		}
	})

	t.Run("ConnectErrors", func(t *testing.T) {
		for _, c := range []struct {
			name, dsn string
			want      []string
		}{
			{"wrong password", "root:s3cretpw@tcp(" + m.Addr + ")/dlock", []string{"MySQL at " + m.Addr + "/dlock refused", "Access denied"}},
			{"URL form, wrong password", "mysql://root:s3cretpw@" + m.Addr + "/dlock", []string{"MySQL at " + m.Addr + "/dlock refused", "Access denied"}},
			{"database missing", "root@tcp(" + m.Addr + ")/nope", []string{"MySQL at " + m.Addr + "/nope refused", "nope"}},
		} {
			r := dlockRun(t, "status", "--mysql", c.dsn, "k")
			t.Logf("%s: exit %d: %s", c.name, r.code, r.stderr)
			if r.code != exitUnavailable || strings.Count(r.stderr, "\n") != 1 {
				t.Errorf("%s: exit %d, want %d and one line", c.name, r.code, exitUnavailable)
			}
			for _, w := range c.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("%s: stderr lacks %q", c.name, w)
				}
			}
			if strings.Contains(r.stderr, "s3cretpw") {
				t.Errorf("%s: stderr shows the password", c.name)
			}
		}
		if r := dlockRun(t, "status", "--mysql", "root:s3cretpw@tcp("+m.Addr, "k"); r.code != exitUsage || strings.Contains(r.stderr, "s3cretpw") {
			t.Errorf("a DSN that does not parse: exit %d, stderr %q; want %d without the password", r.code, r.stderr, exitUsage)
		}
	})
}
