package zklock

import (
	"context"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
)

// TestKilledHolderBlocksForItsTTL: a holder process with a 3s TTL (renewed) and
// a 30s session is killed with SIGKILL while another process's Client waits
// for the lock. The waiter gets it once the holder's TTL has run out by the
// server's clock, after about 3s, not when the session expires 30s later.
func TestKilledHolderBlocksForItsTTL(t *testing.T) {
	const ttl, session = 3 * time.Second, 30 * time.Second
	key := dlocktest.Key(t)
	h := startHelper(t, "ttlholder", key,
		"DLOCK_ZKLOCK_SESSION_MS="+strconv.Itoa(int(session.Milliseconds())),
		"DLOCK_ZKLOCK_TTL_MS="+strconv.Itoa(int(ttl.Milliseconds())))
	token, _ := strconv.ParseUint(h.expect(t, "held", 20*time.Second)[0], 10, 64)

	d := newDriverAt(t, srv.Addr, WithSessionTimeout(session))
	c, err := NewClient(d, dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 2*session)
	type locked struct {
		l   *dlock.Lease
		err error
		at  time.Time
	}
	got := make(chan locked, 1)
	go func() {
		l, err := c.Lock(ctx, key)
		got <- locked{l, err, time.Now()}
	}()
	lp := d.lockPath(key)
	waitQueue(t, d, lp, 10*time.Second, func(q []child) bool { return len(q) == 2 })

	if err := h.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	r := <-got
	if r.err != nil {
		t.Fatalf("Lock after the holder was killed: %v", r.err)
	}
	took := r.at.Sub(killed)
	t.Logf("lock taken %v after the holder (TTL %v, session %v) was killed", took.Round(time.Millisecond), ttl, session)
	if took > ttl+3*time.Second {
		t.Errorf("lock taken %v after the kill, want about the TTL %v", took.Round(time.Millisecond), ttl)
	}
	if r.l.Token() <= token {
		t.Errorf("token %d not above the killed holder's %d", r.l.Token(), token)
	}
	if err := r.l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
}
