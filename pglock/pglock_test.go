package pglock

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/jackc/pgx/v5/pgxpool"
)

// srv is the PostgreSQL server of this package's tests.
var srv *testserver.Postgres

func TestMain(m *testing.M) {
	if os.Getenv(holderEnv) != "" {
		os.Exit(holderMain())
	}
	os.Exit(testserver.MainPostgres(m, func(p *testserver.Postgres) {
		srv = p
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		pool, err := pgxpool.New(ctx, p.URL)
		if err == nil {
			var d *Driver
			if d, err = NewDriver(pool); err == nil {
				err = d.Migrate(ctx)
			}
			pool.Close()
		}
		if err != nil {
			panic(err)
		}
	}))
}

// ServerURL is the URL of the server the tests run against, for examples.
func ServerURL() string { return srv.URL }

// newPool returns a pool of its own (one contender's connections) to the
// test server, closed when the test ends.
func newPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return newPoolURL(t, srv.URL)
}

func newPoolURL(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	// One connection ready: a test's first request does not pay for the
	// connection's set-up (a lease of a few ms could run out meanwhile).
	if err := pool.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	return pool
}

// newDriver returns a Driver over a pool of its own.
func newDriver(t testing.TB, opts ...Option) *Driver {
	t.Helper()
	d, err := NewDriver(newPool(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func newClient(t testing.TB, opts ...dlock.Option) *Client {
	t.Helper()
	return clientOf(t, newDriver(t), opts...)
}

// clientOf returns a Client over d.
func clientOf(t testing.TB, d *Driver, opts ...dlock.Option) *Client {
	t.Helper()
	c, err := NewClient(d, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestConformance(t *testing.T) {
	dlocktest.Run(t, dlocktest.Backend{
		Info: driver.DriverInfo{Backend: "pglock", Kind: driver.KindMutex},
		New:  func(t testing.TB, opts ...dlock.Option) dlock.Locker { return newClient(t, opts...) },
		Skip: map[string]string{
			"ForeignDataIsConflict": "a table row is always a lock; a table of another shape is ErrConflict (TestForeignTableIsConflict)",
		},
	})
}

func TestConformancePolling(t *testing.T) {
	dlocktest.Run(t, dlocktest.Backend{
		Info: driver.DriverInfo{Backend: "pglock", Kind: driver.KindMutex},
		New: func(t testing.TB, opts ...dlock.Option) dlock.Locker {
			return clientOf(t, newDriver(t, WithPolling()), opts...)
		},
		Skip: map[string]string{
			"ForeignDataIsConflict": "a table row is always a lock; a table of another shape is ErrConflict (TestForeignTableIsConflict)",
		},
	})
}
