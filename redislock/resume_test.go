package redislock_test

import (
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/redislock"
)

// TestResumedLeaseIsToldAtOnce: a holding taken up by another Client with
// Resume is registered for the loss push as a grant is: a force-unlock
// reaches the resumed lease at once.
func TestResumedLeaseIsToldAtOnce(t *testing.T) {
	own := testserver.StartRedis(t)
	admin := newRDB(t, own.Addr)
	for _, k := range []struct {
		name string
		new  func() (*dlock.Client, error)
	}{
		{"plain", func() (*dlock.Client, error) { return redislock.New(newRDB(t, own.Addr)) }},
		{"fair", func() (*dlock.Client, error) { return redislock.NewFair(newRDB(t, own.Addr)) }},
	} {
		t.Run(k.name, func(t *testing.T) {
			from, err := k.new()
			if err != nil {
				t.Fatal(err)
			}
			to, err := k.new()
			if err != nil {
				t.Fatal(err)
			}
			took := dlocktest.PushedLoss(t, dlocktest.Resumed(from, to), dlocktest.Key(t), pushBound, forcer(t, admin, 1))
			t.Logf("ForceUnlock to Done: %v", took)
		})
	}
}
