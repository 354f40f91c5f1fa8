package natslock

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/natslock/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"
)

// srv is the single server of this package's tests; cluster, started by
// the first test that needs it, the three-node one.
var (
	srv        *natstest.Server
	tmpDir     string
	clusterMu  sync.Mutex
	cluster    *natstest.Cluster
	clusterErr error
)

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	var err error
	if tmpDir, err = os.MkdirTemp("", "natslock"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmpDir)
	if srv, err = natstest.Start(tmpDir+"/single", natstest.Options{SyncAlways: true}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The examples connect where NATS_URL says, as a user's program would.
	if err := os.Setenv("NATS_URL", srv.URL); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	srv.Shutdown()
	clusterMu.Lock()
	if cluster != nil {
		cluster.Shutdown()
	}
	clusterMu.Unlock()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			return 1
		}
	}
	return code
}

// theCluster returns the three-node cluster, started at the first call.
func theCluster(t testing.TB) *natstest.Cluster {
	t.Helper()
	clusterMu.Lock()
	defer clusterMu.Unlock()
	if cluster == nil && clusterErr == nil {
		cluster, clusterErr = natstest.StartCluster(tmpDir+"/cluster", natstest.Options{SyncAlways: true})
	}
	if clusterErr != nil {
		t.Fatal(clusterErr)
	}
	return cluster
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// connect returns a JetStream context over a connection of its own to url,
// closed when the test ends.
func connect(t testing.TB, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// newDriver returns a Driver over a connection of its own to the single
// server, its bucket migrated.
func newDriver(t testing.TB, opts ...Option) *Driver {
	t.Helper()
	return newDriverURL(t, srv.URL, opts...)
}

func newDriverURL(t testing.TB, url string, opts ...Option) *Driver {
	t.Helper()
	d, err := NewDriver(connect(t, url), opts...)
	if err != nil {
		t.Fatal(err)
	}
	var merr error
	for range 50 { // a cluster elects its meta leader after it starts
		if merr = d.Migrate(ctxT(t, 10*time.Second)); merr == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if merr != nil {
		t.Fatal(merr)
	}
	t.Cleanup(d.Close)
	return d
}
