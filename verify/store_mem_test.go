package verify

import (
	"context"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/memlock"
)

// memlock: the workers are goroutines of the test process, sharing one store
// (Spec.shared); no network, no store faults but the force.
func init() {
	registerBackend(&backend{
		name:   "memlock",
		faults: []string{FaultForce},
		start: func(testing.TB, Config) *store {
			return &store{shared: memlock.NewStore()}
		},
		locker: func(s Spec) (dlock.Locker, func(), error) {
			ms, _ := s.shared.(*memlock.Store)
			lk, err := memlock.New(ms)
			return lk, func() {}, err
		},
		inspector: func(_ Config, st *store) (driver.Inspector, func(), error) {
			return st.shared.(*memlock.Store), func() {}, nil
		},
		leftover: func(t testing.TB, st *store) []string {
			infos, err := driver.List(context.Background(), st.shared.(*memlock.Store), "*")
			if err != nil {
				t.Errorf("verify: listing the memlock store: %v", err)
			}
			var left []string
			for _, in := range infos {
				left = append(left, in.Key)
			}
			return left
		},
	})
}
