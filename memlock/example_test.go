package memlock_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/memlock"
)

// Two "processes" of a service under test share one Store, as two instances
// share a Redis server.
func Example() {
	ctx := context.Background()
	store := memlock.NewStore()
	a, _ := memlock.New(store)
	b, _ := memlock.New(store)

	lease, err := a.TryLock(ctx, "feed:pull")
	if err != nil {
		panic(err)
	}
	_, err = b.TryLock(ctx, "feed:pull")
	fmt.Println("b while a holds:", errors.Is(err, dlock.ErrNotObtained))

	_ = lease.Unlock(ctx)
	lease, err = b.TryLock(ctx, "feed:pull")
	fmt.Println("b after a unlocked:", err == nil)
	_ = lease.Unlock(ctx)
	// Output:
	// b while a holds: true
	// b after a unlocked: true
}
