package testserver

import (
	"strings"
	"testing"
	"time"
)

func TestMariaDBMissingBinaryIsNamed(t *testing.T) {
	t.Setenv("DLOCK_MARIADB_BIN", t.TempDir())
	_, err := NewMariaDB(t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "DLOCK_MARIADB_BIN") {
		t.Fatalf("NewMariaDB without the binaries: %v", err)
	}
}

func TestStartMariaDB(t *testing.T) {
	start := time.Now()
	m := StartMariaDB(t)
	t.Logf("mariadbd ready in %v on %s", time.Since(start), m.DSN)
	if err := m.ping(); err != nil {
		t.Fatalf("ping: %v", err)
	}
	if err := m.Restart(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	if err := m.ping(); err != nil {
		t.Fatalf("ping after restart: %v", err)
	}
	m.Stop()
	if m.PID() != 0 {
		t.Fatal("PID after Stop")
	}
	if m.ping() == nil {
		t.Fatal("ping answered after Stop")
	}
}
