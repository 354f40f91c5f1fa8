package verify

import (
	"flag"
	"fmt"
	"os"
	"testing"
	"time"
)

var (
	seedFlag  = flag.Uint64("seed", 0, "replay this seed only (0: the quick run's seeds, or -seeds of them)")
	seedsFlag = flag.Int("seeds", 0, "run this many seeds per scenario (0: the quick run's)")
	durFlag   = flag.Duration("duration", 0, "each run's workload time (0: the quick run's)")
)

func TestMain(m *testing.M) {
	MaybeWorker() // a worker process exits here
	flag.Parse()
	os.Exit(m.Run())
}

// seeds returns the seeds to run: -seed alone, else -seeds of them from
// first, else quick.
func seeds(first uint64, quick int) []uint64 {
	if *seedFlag != 0 {
		return []uint64{*seedFlag}
	}
	n := quick
	if *seedsFlag > 0 {
		n = *seedsFlag
	}
	var out []uint64
	for i := range n {
		out = append(out, first+uint64(i))
	}
	return out
}

func duration(quick time.Duration) time.Duration {
	if *durFlag > 0 {
		return *durFlag
	}
	return quick
}

// quickSpec is the workers' template of the quick runs: short TTLs.
func quickSpec(kind string) Spec {
	return Spec{Backend: "redis", Kind: kind, Keys: []string{"a", "b"}, TTL: 400 * time.Millisecond,
		Hold: 250 * time.Millisecond, Wait: 1500 * time.Millisecond, ExitProb: 0.05, N: 2}
}

func TestRedisPlainHolderFaults(t *testing.T) {
	for _, seed := range seeds(1, 1) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			c := Config{Spec: quickSpec("plain"), Workers: 4, Duration: duration(6 * time.Second), Seed: seed,
				Faults: []string{FaultStop, FaultKill}, Bound: time.Second}
			r := Run(t, c)
			t.Logf("stats %+v, %v", r.Stats, r.Elapsed)
			r.Report(t, seed)
		})
	}
}
