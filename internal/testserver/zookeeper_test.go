package testserver

import (
	"context"
	"testing"
	"time"
)

// TestZooKeeperEnsembleElectsNewLeader: the leader of a 3-server ensemble
// killed, the other two elect one of theirs; started again, it rejoins as a
// follower.
func TestZooKeeperEnsembleElectsNewLeader(t *testing.T) {
	start := time.Now()
	e := StartZooKeeperEnsemble(t, 3)
	t.Logf("3-server ZooKeeper ensemble ready in %v", time.Since(start))
	if len(e.Addrs()) != 3 {
		t.Fatalf("addresses %v", e.Addrs())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	old, err := e.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	followers := 0
	for _, m := range e.Members {
		if mode, err := m.Mode(); err == nil && mode == "follower" {
			followers++
		}
	}
	if followers != 2 {
		t.Fatalf("%d followers of the leader, want 2", followers)
	}
	old.Stop()
	start = time.Now()
	leader, err := e.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if leader == old {
		t.Fatal("the stopped leader still leads")
	}
	t.Logf("new leader in %v", time.Since(start))
	if err := old.Start(); err != nil {
		t.Fatalf("the old leader rejoining: %v", err)
	}
	if mode, err := old.Mode(); err != nil || mode != "follower" {
		t.Fatalf("the old leader rejoined as %q (%v), want follower", mode, err)
	}
}

// TestZooKeeperStandaloneMode: a server started alone says so.
func TestZooKeeperStandaloneMode(t *testing.T) {
	z := StartZooKeeper(t)
	if mode, err := z.Mode(); err != nil || mode != "standalone" {
		t.Fatalf("mode %q, %v; want standalone", mode, err)
	}
}
