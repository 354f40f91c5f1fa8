package verify

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/redislock"
)

// TestNoExpiryWritesNoExpiryOnRenewal: the noexpiry variant's lock has no
// expiry after its renewals too (the renewer's batch extension included), not
// only after its acquisition.
func TestNoExpiryWritesNoExpiryOnRenewal(t *testing.T) {
	srv := testserver.StartRedis(t)
	rdb := testserver.RedisClient(t, srv.Addr)
	lk, closeLock, _, err := newLocker(Spec{Backend: "redis", Kind: "plain", Variant: "noexpiry", Lock: []string{srv.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer closeLock()
	ctx := context.Background()
	var leases []*dlock.Lease
	for _, key := range []string{"a", "b"} { // two holdings: one renewal round for both
		l, err := lk.TryLock(ctx, key, dlock.WithTTL(300*time.Millisecond), dlock.WithAutoRenew(true))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Unlock(ctx)
		leases = append(leases, l)
	}
	for _, l := range leases {
		first := l.Deadline()
		testserver.Eventually(t, 5*time.Second, "a renewal of "+l.Key(), func() bool { return l.Deadline().After(first) })
		if ttl := rdb.PTTL(ctx, redislock.LockKey(l.Key())).Val(); ttl != -1 {
			t.Errorf("lock %s has an expiry of %v after a renewal, want none", l.Key(), ttl)
		}
	}
}
