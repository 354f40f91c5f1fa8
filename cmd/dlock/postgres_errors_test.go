package main

import (
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/testserver"
)

// TestPostgresConnectErrors: what dlock says when PostgreSQL does not let it
// in: the server's own reason when it answered (not "cannot reach"), the user
// and database names as given with only the password hidden, and no word of
// the TLS attempt that sslmode=prefer makes first.
func TestPostgresConnectErrors(t *testing.T) {
	pg := testserver.StartPostgres(t)
	port, err := testserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	down := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for _, c := range []struct {
		name, url string
		want      []string
		not       []string
	}{
		{"role missing, database named as the user", "postgres://nobody:s3cretpw@" + pg.Addr + "/nobody",
			[]string{"PostgreSQL at " + pg.Addr + "/nobody refused", `role "nobody" does not exist`}, []string{"xxxxx", "tls", "TLS", "cannot reach"}},
		{"password equal to the user name", "postgres://nobody:nobody@" + pg.Addr + "/nobody",
			[]string{"PostgreSQL at " + pg.Addr + "/nobody refused", `role "nobody" does not exist`}, []string{"xxxxx"}},
		{"database missing", "postgres://postgres@" + pg.Addr + "/nope",
			[]string{"PostgreSQL at " + pg.Addr + "/nope refused", `database "nope" does not exist`, "3D000"}, []string{"xxxxx", "tls", "TLS", "cannot reach"}},
		{"key=value string", "host=127.0.0.1 port=" + strconv.Itoa(pg.Port) + " user=postgres password=s3cretpw dbname=nope",
			[]string{`database "nope" does not exist`}, []string{"tls", "cannot reach"}},
		{"server down", "postgres://postgres:s3cretpw@" + down + "/postgres",
			[]string{"cannot reach PostgreSQL at " + down + "/postgres", "connection refused"}, []string{"failed to connect to `user=", "refused; "}},
		{"TLS required, server without", "postgres://postgres@" + pg.Addr + "/postgres?sslmode=require",
			[]string{"cannot reach PostgreSQL", "refused TLS"}, []string{"xxxxx"}},
	} {
		r := dlockRun(t, "status", "--postgres", c.url, "k")
		t.Logf("%s: exit %d: %s", c.name, r.code, r.stderr)
		if r.code != exitUnavailable || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("%s: exit %d, want %d and one line", c.name, r.code, exitUnavailable)
		}
		for _, w := range c.want {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("%s: stderr lacks %q", c.name, w)
			}
		}
		for _, n := range append(c.not, "s3cretpw") {
			if strings.Contains(r.stderr, n) {
				t.Errorf("%s: stderr has %q", c.name, n)
			}
		}
	}
}
