package dlocktest_test

import (
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/memlock"
)

// A backend's conformance test: Run gets a Locker with its own connection for
// every simulated process (here memlock Clients over one Store) and runs every
// subtest against them. In a backend's _test.go file it is a TestConformance
// function; a Go example cannot take a *testing.T, so this one only shows the
// call and does not run it.
func Example() {
	testConformance := func(t *testing.T) {
		store := memlock.NewStore()
		dlocktest.Run(t, dlocktest.Backend{
			New: func(t testing.TB, opts ...dlock.Option) dlock.Locker {
				c, err := memlock.New(store, opts...)
				if err != nil {
					t.Fatal(err)
				}
				return c
			},
		})
	}
	_ = testConformance
}
