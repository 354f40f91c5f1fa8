package verify

import (
	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/legacy"
)

// The legacy timestamp protocol on one Redis server: its keys have no expiry,
// a stale stamp is no leftover.
func init() {
	registerBackend(&backend{
		name:     "legacy",
		start:    startRedisFamily,
		locker:   legacyLocker,
		leftover: redisLeftover,
	})
}

// legacyLocker returns the legacy protocol's Client on s's server.
func legacyLocker(s Spec) (dlock.Locker, func(), error) {
	uc, closeFn, err := redisUniversal(s)
	if err != nil {
		return nil, func() {}, err
	}
	lk, err := legacy.New(uc, legacy.Format{})
	return lk, closeFn, err
}
