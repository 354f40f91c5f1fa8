package verify

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/redislock"
)

// plainTokenFromRecord reports whether the plain lock of this tree draws its
// next token from a released lock record alone (record + 1), without the server
// clock: the behaviour that repeats a token after a failover to a lagging
// replica or a crash-restart that lost the last grant.
func plainTokenFromRecord(t *testing.T) bool {
	srv := testserver.StartRedis(t)
	rdb := testserver.RedisClient(t, srv.Addr)
	ctx := context.Background()
	if err := rdb.Set(ctx, redislock.LockKey("probe"), "-1", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	c, err := redislock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.TryLock(ctx, "probe")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	return l.Token() == 2
}

// TestPlainLockTokensAcrossFailover runs the plain lock itself (no variant)
// under failovers to a lagging replica. With the token drawn from the record
// alone the fencing checker must find the repeated token; with the server
// clock taken into account every checker must pass.
func TestPlainLockTokensAcrossFailover(t *testing.T) {
	fromRecord := plainTokenFromRecord(t)
	for _, seed := range seeds(1, 2) {
		spec := quickSpec("plain")
		spec.TTL, spec.Hold = time.Second, 150*time.Millisecond
		spec.Keys = []string{"a", "b", "c", "d", "e", "f"} // idle keys: released records at a cut
		c := Config{Spec: spec, Workers: 4, Duration: duration(5 * time.Second), Seed: seed,
			Faults: []string{FaultFailover}, Replica: true, Bound: time.Second}
		r := Run(t, c)
		if !fromRecord {
			r.Report(t, seed)
			continue
		}
		for _, v := range r.Violations {
			if v.Checker == "fencing" {
				t.Logf("the plain lock draws its token from the released record: the token repeat is found (seed %d):\n%s", seed, v.Format(r.History))
				return
			}
		}
	}
	if fromRecord {
		t.Error("the plain lock draws its token from the released record, but no run found the repeated token")
	}
}
