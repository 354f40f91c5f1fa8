package memlock_test

import (
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/memlock"
)

func TestSyncConformance(t *testing.T) {
	store := memlock.NewStore()
	dlocktest.RunSync(t, dlocktest.SyncBackend{New: func(testing.TB) dlock.SyncDriver { return store }, TTL: 100 * 1e6})
}
