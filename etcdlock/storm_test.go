package etcdlock

import (
	"context"
	"errors"
	mrand "math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testserver"
)

// TestCancellationStormLeavesNoLease: 40 goroutines on 4 Clients (each with a
// connection of its own) call Lock with deadlines of 0-20ms on one key for 3s.
// Once the TTL and the request timeout have passed, no lease of theirs is left
// in etcd (the server revokes expired leases at a bounded rate, which the wait
// allows for): neither an attempt's lease nor the mark of an abandoned
// acquisition.
func TestCancellationStormLeavesNoLease(t *testing.T) {
	const (
		ttl     = 2 * time.Second
		timeout = time.Second
		storm   = 3 * time.Second
	)
	e := testserver.StartEtcd(t) // a server of its own: every lease on it is the storm's
	var clients []*Client
	for range 4 {
		d, err := NewDriver(newEtcd(t, e.Addr), WithRequestTimeout(timeout))
		if err != nil {
			t.Fatal(err)
		}
		c, err := NewClient(d, dlock.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	key := testKey(t)
	var (
		wg                   sync.WaitGroup
		mu                   sync.Mutex
		calls, held, unavail int
	)
	end := time.Now().Add(storm)
	for g := range 40 {
		c := clients[g%len(clients)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(mrand.N(20001))*time.Microsecond)
				l, err := c.Lock(ctx, key)
				cancel()
				mu.Lock()
				calls++
				switch {
				case err == nil:
					held++
				case errors.Is(err, dlock.ErrUnavailable):
					unavail++
				}
				mu.Unlock()
				if err == nil {
					_ = l.Unlock(context.Background())
				}
			}
		}()
	}
	wg.Wait()
	stormEnd := time.Now()
	cli := newEtcd(t, e.Addr)
	count := func() int {
		resp, err := cli.Leases(ctxT(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return len(resp.Leases)
	}
	atEnd := count()
	// Every lease of the storm expires by the TTL plus the request timeout (the
	// marks); etcd checks expiry every 500ms and revokes about 1000 leases a
	// second.
	expiry := ttl + timeout + time.Second
	revoking := time.Duration(atEnd)*time.Millisecond + 3*time.Second
	time.Sleep(time.Until(stormEnd.Add(expiry))) // the TTLs themselves: nothing to await
	atExpiry := count()
	left := atExpiry
	for deadline := time.Now().Add(revoking); left > 0 && time.Now().Before(deadline); left = count() {
		time.Sleep(250 * time.Millisecond) // polling etcd: its expiry has no event to wait for
	}
	t.Logf("%d Lock calls (%d held, %d unavailable): %d leases at the end of the storm, %d at TTL+timeout+1s, %d after %v more",
		calls, held, unavail, atEnd, atExpiry, left, revoking)
	if left > 0 {
		t.Errorf("%d leases left %v after the storm", left, time.Since(stormEnd).Round(time.Millisecond))
	}
}
