package pglock

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/jackc/pgx/v5/pgxpool"
)

// countingConn counts the messages a connection writes: pgx writes a prepared
// query's Bind, Execute and Sync in one write, so one write is one statement.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	c.n.Add(1)
	return c.Conn.Write(b)
}

// TestStatementsPerCycle: an uncontended lock and unlock cost the database one
// statement (one round trip) each, the UPDATE of the key's row in place, as
// pg_try_advisory_lock and pg_advisory_unlock do; an Extend one. (A key's
// first lock costs a second statement, which inserts its row.)
func TestStatementsPerCycle(t *testing.T) {
	var writes atomic.Int64
	cfg, err := pgxpool.ParseConfig(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{c, &writes}, nil
	}
	ctx := ctxT(t, 30*time.Second)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	d, err := NewDriver(pool, WithCreateTable())
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(d, dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	key := dlocktest.Key(t)
	cycle := func() {
		t.Helper()
		l, err := c.TryLock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Extend(ctx, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The LISTEN connection that tells holders of a force-unlock is not a
	// cycle's: it is set up before, and kept. (A Driver's connection lingers
	// only listenLinger after its last holding; one set up again while a
	// lock is held also checks the holding, a statement more.)
	keepListening(t, d)
	cycle() // connects, prepares the statements, inserts the key's row
	const n = 20
	before := writes.Load()
	for range n {
		cycle()
	}
	if got := writes.Load() - before; got != 3*n {
		t.Errorf("%d TryLock+Extend+Unlock cycles wrote %d statements, want %d (one each)", n, got, 3*n)
	}
	before = writes.Load()
	for range n {
		l, err := c.Lock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := writes.Load() - before; got != 2*n {
		t.Errorf("%d uncontended Lock+Unlock cycles wrote %d statements, want %d (one each)", n, got, 2*n)
	}
}
