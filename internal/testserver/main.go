package testserver

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"go.uber.org/goleak"
)

// Main runs a test binary's tests against one redis-server started for them in a
// temporary directory: use receives the server before the tests run. Afterwards
// Main stops the server, removes the directory, and fails a passing run that left
// goroutines behind. It returns the exit code, for TestMain to pass to os.Exit:
//
//	func TestMain(m *testing.M) { os.Exit(testserver.Main(m, func(r *testserver.Redis) { srv = r })) }
func Main(m *testing.M, use func(*Redis)) int {
	return runMain(m, func(dir string) (func(), error) {
		srv, err := NewRedis(dir)
		if err != nil {
			return nil, err
		}
		use(srv)
		return srv.Stop, nil
	})
}

// MainN is Main with n independent redis-servers (for Redlock).
func MainN(m *testing.M, n int, use func([]*Redis)) int {
	return runMain(m, func(dir string) (func(), error) {
		var srvs []*Redis
		stop := func() {
			for _, s := range srvs {
				s.Stop()
			}
		}
		for i := 0; i < n; i++ {
			sub := filepath.Join(dir, strconv.Itoa(i))
			if err := os.Mkdir(sub, 0o755); err != nil {
				stop()
				return nil, err
			}
			srv, err := NewRedis(sub)
			if err != nil {
				stop()
				return nil, err
			}
			srvs = append(srvs, srv)
		}
		use(srvs)
		return stop, nil
	})
}

// MainZooKeeper is Main with one ZooKeeper server (see NewZooKeeper) instead of a
// redis-server: the JVM's start-up is paid once per test binary.
func MainZooKeeper(m *testing.M, use func(*ZooKeeper)) int {
	return runMain(m, func(dir string) (func(), error) {
		srv, err := NewZooKeeper(dir)
		if err != nil {
			return nil, err
		}
		use(srv)
		return srv.Stop, nil
	})
}

// MainEtcd is Main with one single-member etcd instead of a redis-server.
func MainEtcd(m *testing.M, use func(*Etcd)) int {
	return runMain(m, func(dir string) (func(), error) {
		srv, err := NewEtcd(dir)
		if err != nil {
			return nil, err
		}
		use(srv)
		return srv.Stop, nil
	})
}

// runMain starts a server in a temporary directory with start, runs the tests,
// stops the server and checks for leaked goroutines.
func runMain(m *testing.M, start func(dir string) (stop func(), err error)) int {
	dir, err := os.MkdirTemp("", "dlock-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	stop, err := start(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			return 1
		}
	}
	return code
}
