package testserver

import (
	"fmt"
	"os"
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
	dir, err := os.MkdirTemp("", "dlock-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	srv, err := NewRedis(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	use(srv)
	code := m.Run()
	srv.Stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			return 1
		}
	}
	return code
}
