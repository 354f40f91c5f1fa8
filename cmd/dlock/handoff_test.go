package main

import (
	"strings"
	"testing"

	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testserver"
)

// TestLockExtendUnlockByReference: a lock taken by one dlock process is
// extended and released by others from the reference it printed, as the
// steps of a pipeline do; status shows it held meanwhile; a busy lock exits
// 75, a reference of a released holding exits 1, a bad one 64.
func TestLockExtendUnlockByReference(t *testing.T) {
	pg := testserver.StartPostgres(t)
	for _, k := range []struct {
		name  string
		flags []string
	}{
		{"redis", nil},
		{"redis fair", []string{"--fair"}},
		{"postgres", []string{"--postgres", pg.URL}},
	} {
		t.Run(k.name, func(t *testing.T) {
			key := dlocktest.Key(t)
			server := k.flags
			if len(server) > 0 && server[0] == "--fair" {
				server = nil
			}
			r := dlockRun(t, append(append([]string{"lock", "--ttl", "1m", "--description", "ci step 1"}, k.flags...), key)...)
			if r.code != 0 {
				t.Fatalf("lock: exit %d: %s", r.code, r.stderr)
			}
			ref := strings.TrimSpace(r.stdout)
			if _, err := driver.ParseRef(ref); err != nil || strings.Count(r.stdout, "\n") != 1 {
				t.Fatalf("lock printed %q, not one reference: %v", r.stdout, err)
			}
			r = dlockRun(t, append(append([]string{"status"}, server...), key)...)
			if r.code != 0 || !strings.Contains(r.stdout, "ci step 1") {
				t.Fatalf("status of a detached holding: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			if r = dlockRun(t, append(append([]string{"lock", "--ttl", "1m"}, k.flags...), key)...); r.code != exitNotObtained {
				t.Fatalf("lock of a held key: exit %d, want %d: %s", r.code, exitNotObtained, r.stderr)
			}
			r = dlockRun(t, append(append([]string{"extend", "--ttl", "2m"}, server...), ref)...)
			if r.code != 0 {
				t.Fatalf("extend: exit %d: %s", r.code, r.stderr)
			}
			next := strings.TrimSpace(r.stdout)
			if nr, err := driver.ParseRef(next); err != nil || nr.TTL.Minutes() != 2 {
				t.Fatalf("extend printed %q (%+v, %v), want the holding with a 2m TTL", r.stdout, nr, err)
			}
			r = dlockRun(t, append(append([]string{"unlock"}, server...), next)...)
			if r.code != 0 {
				t.Fatalf("unlock REF: exit %d: %s", r.code, r.stderr)
			}
			for _, again := range [][]string{{"unlock"}, {"extend", "--ttl", "1m"}} {
				if r = dlockRun(t, append(append(again, server...), ref)...); r.code != exitFailure || !strings.Contains(r.stderr, "not held") {
					t.Fatalf("%s of a released holding: exit %d, want %d: %s", again[0], r.code, exitFailure, r.stderr)
				}
			}
			if r = dlockRun(t, append(append([]string{"status"}, server...), key)...); r.code != exitFailure {
				t.Fatalf("status after unlock REF: exit %d, want free\n%s", r.code, r.stdout)
			}
			for _, bad := range []string{ref[:len(ref)-4], driver.RefPrefix + "x"} {
				if r = dlockRun(t, append(append([]string{"unlock"}, server...), bad)...); r.code != exitUsage {
					t.Fatalf("unlock of a bad reference: exit %d, want %d: %s", r.code, exitUsage, r.stderr)
				}
			}
		})
	}
	if r := dlockRun(t, "lock", dlocktest.Key(t)); r.code != exitUsage || !strings.Contains(r.stderr, "--ttl") {
		t.Fatalf("lock without --ttl: exit %d: %s", r.code, r.stderr)
	}
}
