package testserver

import (
	"strings"
	"testing"
	"time"
)

func TestPostgresMissingBinaryIsNamed(t *testing.T) {
	t.Setenv("DLOCK_POSTGRES_BIN", t.TempDir())
	_, err := NewPostgres(t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "DLOCK_POSTGRES_BIN") {
		t.Fatalf("NewPostgres without the binaries: %v", err)
	}
}

func TestStartPostgres(t *testing.T) {
	start := time.Now()
	p := StartPostgres(t)
	t.Logf("postgres ready in %v on %s", time.Since(start), p.URL)
	if err := p.ping(); err != nil {
		t.Fatalf("ping: %v", err)
	}
	if err := p.Restart(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	if err := p.ping(); err != nil {
		t.Fatalf("ping after restart: %v", err)
	}
	p.Stop()
	if p.PID() != 0 {
		t.Fatal("PID after Stop")
	}
	if p.ping() == nil {
		t.Fatal("ping answered after Stop")
	}
}
