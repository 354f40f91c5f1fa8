package dlock

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlock-go/dlock/driver"
)

// Resize sets the number of permits of the semaphore key to n for every Client
// of the key, in every process (see driver.Resizer): no permit is granted
// while n or more are held, holders above a lowered n keep their permits until
// they release them or their leases end, and waiters are woken at once when a
// raised n frees permits. The size stays stored after the last permit is
// released. It returns an error matching ErrInvalid for n < 1, a bad key or an
// n above the backend's maximum, ErrConflict when key is another kind of lock,
// and one matching errors.ErrUnsupported when the Client's backend is not a
// resizable semaphore.
func (c *Client) Resize(ctx context.Context, key string, n int) error {
	if c == nil {
		return invalidf("nil client")
	}
	if ctx == nil {
		return invalidf("nil context")
	}
	if err := driver.ValidateKey(key); err != nil {
		return err
	}
	if n < 1 {
		return invalidf("semaphore size %d: want at least 1", n)
	}
	r, ok := c.d.(driver.Resizer)
	if !ok {
		return fmt.Errorf("dlock: the %T backend is not a resizable semaphore: %w", c.d, errors.ErrUnsupported)
	}
	return r.Resize(ctx, key, n)
}
