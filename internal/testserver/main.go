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
	return MainN(m, 1, func(rs []*Redis) { use(rs[0]) })
}

// MainN is Main with n independent servers (for Redlock).
func MainN(m *testing.M, n int, use func([]*Redis)) int {
	dir, err := os.MkdirTemp("", "dlock-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	srvs := make([]*Redis, 0, n)
	defer func() {
		for _, s := range srvs {
			s.Stop()
		}
	}()
	for i := 0; i < n; i++ {
		sub := filepath.Join(dir, strconv.Itoa(i))
		if err := os.Mkdir(sub, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		srv, err := NewRedis(sub)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		srvs = append(srvs, srv)
	}
	use(srvs)
	code := m.Run()
	for _, s := range srvs {
		s.Stop()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			return 1
		}
	}
	return code
}
