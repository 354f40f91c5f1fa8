package mysqllock

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/driver"
	"github.com/go-sql-driver/mysql"
)

// lateDriver returns a Driver whose statements read the server's clock as it
// was behind a second ago: MariaDB and MySQL read the clock of a statement
// once, at its start, so these are the statements of a holder that the
// server started a second before they ran (one that waited that long for the
// row, or for the CPU, while a later one of the same holder went first).
// SET timestamp makes the session's clock read that instant.
func lateDriver(t *testing.T, behind time.Duration) *Driver {
	t.Helper()
	cfg, err := mysql.ParseDSN(srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	at := float64(time.Now().Add(-behind).UnixMicro()) / 1e6
	cfg.Params = map[string]string{"timestamp": strconv.FormatFloat(at, 'f', 6, 64)}
	d, err := NewDriver(newDBDSN(t, cfg.FormatDSN()), WithPolling())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestLateStatementNeverShortensAHolding: a statement of the holder that the
// server started before the holder's latest successful one and ran after it
// leaves the holding's expiry where the latest one put it. Before, it moved
// the expiry back to its own start plus the TTL: the row was free for others
// up to that long before the holder's local deadline (an acquisition retried
// after a timeout, or a renewal that waited for the row behind a renewal sent
// later; found by the verification suite as a grant to another worker while
// the holder's lease had 47 ms left, at a load average of 50).
func TestLateStatementNeverShortensAHolding(t *testing.T) {
	const ttl = 4 * time.Second
	const behind = 1500 * time.Millisecond
	ctx := ctxT(t, 30*time.Second)
	for _, tc := range []struct {
		name string
		late func(d *Driver, h driver.Holding, token uint64) error
	}{
		{"acquire again", func(d *Driver, h driver.Holding, _ uint64) error {
			_, err := d.Acquire(ctx, driver.AcquireRequest{Key: h.Key, Owner: h.Owner, TTL: ttl})
			return err
		}},
		{"extend", func(d *Driver, h driver.Holding, _ uint64) error {
			_, err := d.Extend(ctx, h, ttl)
			return err
		}},
		{"extend many", func(d *Driver, h driver.Holding, _ uint64) error {
			return d.ExtendMany(ctx, []driver.ExtendRequest{{Holding: h, TTL: ttl}})[0].Err
		}},
		{"resume", func(d *Driver, h driver.Holding, token uint64) error {
			_, err := d.Resume(ctx, h, token)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDriver(t)
			h := driver.Holding{Key: dlocktest.Key(t), Owner: "holder", TTL: ttl}
			start := time.Now()
			g, err := d.Acquire(ctx, driver.AcquireRequest{Key: h.Key, Owner: h.Owner, TTL: ttl})
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.late(lateDriver(t, behind), h, g.Token); err != nil {
				t.Fatalf("the late statement: %v", err)
			}
			checkLeft(ctx, t, d, h, start, behind)
		})
	}
	t.Run("semaphore extend", func(t *testing.T) {
		s, err := NewSemaphoreDriver(newDB(t), 2)
		if err != nil {
			t.Fatal(err)
		}
		h := driver.Holding{Key: dlocktest.Key(t), Owner: "holder", TTL: ttl}
		start := time.Now()
		if _, err := s.Acquire(ctx, driver.AcquireRequest{Key: h.Key, Owner: h.Owner, TTL: ttl}); err != nil {
			t.Fatal(err)
		}
		late, err := NewSemaphoreDriver(lateDriver(t, behind).db, 2, WithPolling())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := late.Extend(ctx, h, ttl); err != nil {
			t.Fatalf("the late extend: %v", err)
		}
		checkLeft(ctx, t, s, h, start, behind)
	})
}

// checkLeft fails the test unless h, granted by d at start, has at least
// what its grant gave it left after a statement that started behind early.
func checkLeft(ctx context.Context, t *testing.T, d driver.Driver, h driver.Holding, start time.Time, behind time.Duration) {
	t.Helper()
	left, err := d.TTL(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	if want := h.TTL - time.Since(start); left < want {
		t.Errorf("the holding has %v left after a statement started %v early, want at least %v (the grant's)", left.Round(time.Millisecond), behind, want.Round(time.Millisecond))
	}
}
