package dlock_test

import (
	"os"
	"testing"

	"github.com/dlock-go/dlock/internal/testserver"
)

// redisAddr is the address of the redis-server TestMain starts for the tests.
var redisAddr string

func TestMain(m *testing.M) {
	os.Exit(testserver.Main(m, func(r *testserver.Redis) { redisAddr = r.Addr }))
}
