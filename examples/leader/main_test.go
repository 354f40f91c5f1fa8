package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testserver"
)

var srv *testserver.Redis

func TestMain(m *testing.M) { os.Exit(testserver.Main(m, func(r *testserver.Redis) { srv = r })) }

// TestLeaderTakesOver runs the scenario against a real server: one leader at a
// time, another instance leads within the TTL after the leader is killed, and
// the feed counts every pull the leaders saw (plus at most the one in flight
// when the leader was killed).
func TestLeaderTakesOver(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var b [4]byte
	_, _ = rand.Read(b[:])
	cfg := config{Instances: 3, TTL: time.Second, Items: 5, PullEvery: 20 * time.Millisecond, Role: "leader-test-" + hex.EncodeToString(b[:])}
	var out bytes.Buffer
	rep, err := run(ctx, srv.Addr, cfg, &out)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if rep.First == "" || rep.Second == "" || rep.First == rep.Second {
		t.Fatalf("leaders %q then %q\n%s", rep.First, rep.Second, out.String())
	}
	// The waiters sleep until the dead leader's key expires: at most the TTL
	// after its last renewal, plus a round trip.
	if rep.Takeover > cfg.TTL+500*time.Millisecond {
		t.Errorf("took over %v after the kill, TTL %v\n%s", rep.Takeover, cfg.TTL, out.String())
	}
	if rep.Pulled < int64(2*cfg.Items) {
		t.Errorf("pulled %d items, want at least %d", rep.Pulled, 2*cfg.Items)
	}
	t.Logf("output:\n%s", out.String())
	if !strings.Contains(out.String(), "asks who leads: "+rep.Second) {
		t.Errorf("output:\n%s", out.String())
	}
}
