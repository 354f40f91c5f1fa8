package verify

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// nemesisDraws runs the nemesis of seed for a while on no processes and no
// servers (a kill of a worker that is not running is recorded and sends no
// signal; a PostgreSQL fault without PostgreSQL is drawn and skipped), and
// returns the targets of the kills it recorded, in order.
func nemesisDraws(t *testing.T, seed uint64) []int {
	dir := t.TempDir()
	rec, err := NewRecorder(filepath.Join(dir, "nemesis.jsonl"), -1)
	if err != nil {
		t.Fatal(err)
	}
	c := Config{Spec: Spec{TTL: 4 * time.Millisecond}, Workers: 8, Seed: seed, Faults: []string{FaultKill, FaultTerminate}}
	ws := &procs{pids: make([]int, c.Workers)}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	n, closeN, err := testNemesis(c, &backend{name: "none"}, &store{}, ws, rec)
	if err != nil {
		t.Fatal(err)
	}
	defer closeN()
	if err := n.run(ctx); err != nil {
		t.Fatal(err)
	}
	rec.Close()
	h, err := ReadHistory(dir)
	if err != nil {
		t.Fatal(err)
	}
	var targets []int
	for _, e := range h {
		if e.Op == OpNemesis && e.Type == Invoke && e.Fault == FaultKill {
			targets = append(targets, e.Target)
		}
	}
	return targets
}

// TestNemesisSeedReplaysItsDraws checks that a seed printed by a failing run
// replays the same nemesis schedule: the same seed draws the same faults and
// targets (the timing of the rounds aside), another seed others.
func TestNemesisSeedReplaysItsDraws(t *testing.T) {
	a, b, other := nemesisDraws(t, 7), nemesisDraws(t, 7), nemesisDraws(t, 8)
	n := min(len(a), len(b), len(other))
	if n < 10 {
		t.Fatalf("too few rounds to compare: %d, %d and %d kills", len(a), len(b), len(other))
	}
	if !slices.Equal(a[:n], b[:n]) {
		t.Errorf("seed 7 drew\n%v\nthen\n%v", a[:n], b[:n])
	}
	if slices.Equal(a[:n], other[:n]) {
		t.Errorf("seeds 7 and 8 drew the same %d kills: %v", n, a[:n])
	}
}
