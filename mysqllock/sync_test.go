package mysqllock

import (
	"testing"

	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/driver"
)

func TestSync(t *testing.T) {
	dlocktest.RunSync(t, dlocktest.SyncBackend{
		New: func(t testing.TB) driver.SyncDriver { return newDriver(t) },
	})
}
