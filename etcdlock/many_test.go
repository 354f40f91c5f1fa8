package etcdlock

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
)

// TestExtendManyChecksInBatches extends many holdings of one Driver at once:
// each TTL's holdings share one lease, renewed at most once, and are checked
// checksPerTxn to a transaction; a holding whose entry was removed (forced
// unlock) fails alone with ErrNotHeld.
func TestExtendManyChecksInBatches(t *testing.T) {
	rc := &requestCounter{n: map[string]int{}}
	_, d := countedClient(t, rc)
	ctx := ctxT(t, 30*time.Second)
	key := testKey(t)
	const n = 150
	var hs []driver.Holding
	var ttls []time.Duration
	for i := 0; i <= n; i++ {
		ttl := 15 * time.Second
		if i == n {
			ttl = 5 * time.Second // another lease
		}
		k, o := key+"/"+strconv.Itoa(i), owner()
		g := mustGrant(t, d, driver.AcquireRequest{Key: k, Owner: o, TTL: ttl})
		hs = append(hs, driver.Holding{Key: k, Owner: o, TTL: ttl, Handle: g.Handle})
		ttls = append(ttls, ttl)
	}
	const forced = 7
	if _, err := newDriver(t).ForceUnlock(ctx, hs[forced].Key); err != nil {
		t.Fatal(err)
	}
	rc.take()
	granted, errs := d.extendMany(ctx, hs, ttls)
	for i, err := range errs {
		switch {
		case i == forced:
			if !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("forced holding: %v, want ErrNotHeld", err)
			}
		case err != nil || granted[i] != ttls[i]:
			t.Errorf("holding %d: %v, %v", i, granted[i], err)
		}
	}
	c := rc.take()
	// Two transactions for the 150 holdings of 15s, one for the one of 5s,
	// and no renewal: both leases are fresh.
	if c["Txn"] != 3 || total(c) != 3 {
		t.Errorf("extending %d holdings: %s; want Txn 3", n+1, show(c))
	}
	if _, err := d.Extend(ctx, hs[forced], ttls[forced]); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Extend of the forced holding: %v", err)
	}
	for i, h := range hs {
		if i != forced {
			if err := d.Release(ctx, h); err != nil {
				t.Fatal(err)
			}
		}
	}
}
