package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testserver"
)

var url string

func TestMain(m *testing.M) {
	os.Exit(testserver.MainPostgres(m, func(p *testserver.Postgres) { url = p.URL }))
}

func TestPausedProcessorsLateCommitIsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for round := 0; round < 2; round++ { // a second run over the existing tables
		var out bytes.Buffer
		if err := Run(ctx, url, &out); err != nil {
			t.Fatalf("round %d: %v\n%s", round, err, out.String())
		}
		t.Log("\n" + out.String())
		for _, want := range []string{"reads it new", "B holds the lock", "refused (stale token: true)", "shipped once"} {
			if !strings.Contains(out.String(), want) {
				t.Fatalf("round %d: output lacks %q:\n%s", round, want, out.String())
			}
		}
	}
}
