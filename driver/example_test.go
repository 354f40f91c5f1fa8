package driver_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/memlock"
)

// A Driver's single attempts, here on memlock's Store: the first owner gets the
// key with a token, the second is told it is taken, and only the owner can
// release it.
func Example() {
	ctx := context.Background()
	var d driver.Driver = memlock.NewStore()

	first := driver.AcquireRequest{Key: "jobs:nightly", Owner: "owner-a", TTL: 10 * time.Second}
	g, err := d.Acquire(ctx, first)
	if err != nil {
		fmt.Println("acquire:", err)
		return
	}
	fmt.Println("owner-a holds it with a token:", g.Token > 0)

	_, err = d.Acquire(ctx, driver.AcquireRequest{Key: "jobs:nightly", Owner: "owner-b", TTL: 10 * time.Second})
	var taken *driver.Taken
	fmt.Println("owner-b is told it is taken:", errors.As(err, &taken))

	stale := driver.Holding{Key: "jobs:nightly", Owner: "owner-b", TTL: 10 * time.Second}
	fmt.Println("owner-b cannot release it:", errors.Is(d.Release(ctx, stale), driver.ErrNotHeld))

	h := driver.Holding{Key: "jobs:nightly", Owner: "owner-a", TTL: 10 * time.Second, Handle: g.Handle}
	fmt.Println("owner-a releases it:", d.Release(ctx, h) == nil)
	// Output:
	// owner-a holds it with a token: true
	// owner-b is told it is taken: true
	// owner-b cannot release it: true
	// owner-a releases it: true
}

// MatchKey is how every List reads a pattern.
func ExampleMatchKey() {
	fmt.Println(driver.MatchKey("jobs:*", "jobs:nightly"), driver.MatchKey("jobs:?", "jobs:nightly"))
	// Output: true false
}
