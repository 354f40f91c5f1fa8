package natstest

import (
	"errors"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestTakenPortIsToldAtOnce: a server whose port another listener took in
// the meantime is reported as such, at once, so that Start tries other ports
// (it used to wait its whole 20 s for a server that would never listen).
func TestTakenPortIsToldAtOnce(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	start := time.Now()
	s, err := run(baseOptions("dlock-taken", t.TempDir(), port, Options{}))
	if err == nil {
		s.Shutdown()
		t.Fatalf("a server on taken port %d started", port)
	}
	if !errors.Is(err, errListen) {
		t.Fatalf("run on a taken port: %v, want errListen", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("run told of the taken port after %v", d)
	}
}

// TestStartAndCluster: one server and a cluster of three start and take
// connections.
func TestStartAndCluster(t *testing.T) {
	s, err := Start(t.TempDir(), Options{SyncAlways: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Shutdown()
	c, err := StartCluster(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()
	for _, s := range c.Servers {
		conn, err := net.Dial("tcp", s.URL[len("nats://"):])
		if err != nil {
			t.Fatalf("server %s: %v", s.Name(), err)
		}
		conn.Close()
	}
}
