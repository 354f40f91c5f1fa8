package mysqllock

import (
	"context"
	"database/sql"
	"os"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testserver"
	_ "github.com/go-sql-driver/mysql"
)

// srv is the MariaDB server of this package's tests.
var srv *testserver.MariaDB

func TestMain(m *testing.M) {
	os.Exit(testserver.MainMariaDB(m, func(s *testserver.MariaDB) {
		srv = s
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		db, err := sql.Open("mysql", s.DSN)
		if err == nil {
			var d *Driver
			if d, err = NewDriver(db); err == nil {
				err = d.Migrate(ctx)
			}
			_ = db.Close()
		}
		if err != nil {
			panic(err)
		}
	}))
}

// newDB returns a *sql.DB of its own (one contender's connections) to the
// test server, closed when the test ends.
func newDB(t testing.TB) *sql.DB {
	t.Helper()
	return newDBDSN(t, srv.DSN)
}

func newDBDSN(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// One connection ready: a test's first request does not pay for the
	// connection's set-up.
	if err := db.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	return db
}

// newDriver returns a Driver over a *sql.DB of its own.
func newDriver(t testing.TB, opts ...Option) *Driver {
	t.Helper()
	d, err := NewDriver(newDB(t), opts...)
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

var conformanceSkips = map[string]string{
	"ForeignDataIsConflict": "a table row is always a lock; a table of another shape is ErrConflict (TestForeignTableIsConflict)",
}

func TestConformance(t *testing.T) {
	dlocktest.Run(t, dlocktest.Backend{
		Info: driver.DriverInfo{Backend: "mysqllock", Kind: driver.KindMutex},
		New:  func(t testing.TB, opts ...dlock.Option) dlock.Locker { return newClient(t, opts...) },
		Skip: conformanceSkips,
	})
}

func TestConformancePolling(t *testing.T) {
	dlocktest.Run(t, dlocktest.Backend{
		Info: driver.DriverInfo{Backend: "mysqllock", Kind: driver.KindMutex},
		New: func(t testing.TB, opts ...dlock.Option) dlock.Locker {
			return clientOf(t, newDriver(t, WithPolling()), opts...)
		},
		Skip: conformanceSkips,
	})
}
