package zklock

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testserver"
)

// srv is the ZooKeeper server of this test binary.
var srv *testserver.ZooKeeper

func TestMain(m *testing.M) {
	if helperMain() {
		return
	}
	os.Exit(testserver.MainZooKeeper(m, func(z *testserver.ZooKeeper) { srv = z }))
}

// testSession is the session timeout of the test drivers: room for Extend(20s)
// in the conformance suite, within the test server's maximum.
const testSession = 25 * time.Second

func newDriver(t testing.TB, opts ...Option) *Driver {
	t.Helper()
	return newDriverAt(t, srv.Addr, opts...)
}

func newDriverAt(t testing.TB, addr string, opts ...Option) *Driver {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := NewDriver(ctx, []string{addr}, append([]Option{WithSessionTimeout(testSession)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
