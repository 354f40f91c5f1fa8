package dlock

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlock-go/dlock/driver"
)

var _ driver.Inspector = (*Client)(nil)

// inspector returns the Client's driver as an Inspector, or an error matching
// errors.ErrUnsupported when the backend cannot read its locks.
func (c *Client) inspector() (driver.Inspector, error) {
	if c == nil {
		return nil, invalidf("nil client")
	}
	in, ok := c.d.(driver.Inspector)
	if !ok {
		return nil, fmt.Errorf("dlock: the %T backend cannot inspect its locks: %w", c.d, errors.ErrUnsupported)
	}
	return in, nil
}

// Inspect reads the lock named key without changing it, through the Client's
// backend (see Inspector). A free lock is not an error: the result has Held
// false. A backend that cannot read its locks returns an error matching
// errors.ErrUnsupported.
func (c *Client) Inspect(ctx context.Context, key string) (LockInfo, error) {
	in, err := c.inspector()
	if err != nil {
		return LockInfo{Key: key}, err
	}
	return in.Inspect(ctx, key)
}

// List returns the held locks whose names match pattern (a glob, see
// driver.MatchKey), sorted by key, through the Client's backend (see
// driver.List).
func (c *Client) List(ctx context.Context, pattern string) ([]LockInfo, error) {
	in, err := c.inspector()
	if err != nil {
		return nil, err
	}
	return driver.List(ctx, in, pattern)
}

// ListPrefix returns the backend's candidates for the locks whose names start
// with prefix, unfiltered and unsorted (see driver.Inspector); List is what a
// caller wants.
func (c *Client) ListPrefix(ctx context.Context, prefix string) ([]LockInfo, error) {
	in, err := c.inspector()
	if err != nil {
		return nil, err
	}
	return in.ListPrefix(ctx, prefix)
}

// ForceUnlock removes the holding of key whoever holds it and returns what it
// removed, through the Client's backend (see Inspector). A free lock is
// ErrNotHeld. The holder's lease is lost at once where the backend pushes the
// news (every backend of this module's family does: LossStoreSignal), and
// otherwise at its next renewal or its local deadline.
func (c *Client) ForceUnlock(ctx context.Context, key string) (LockInfo, error) {
	in, err := c.inspector()
	if err != nil {
		return LockInfo{Key: key}, err
	}
	return in.ForceUnlock(ctx, key)
}

var _ driver.KeyWatcher = (*Client)(nil)

// WatchKey reports changes of the lock named key through the Client's backend
// (see KeyWatcher). A backend that cannot watch its locks returns an error
// matching errors.ErrUnsupported: poll Inspect instead.
func (c *Client) WatchKey(ctx context.Context, key string) (<-chan struct{}, error) {
	if c == nil {
		return nil, invalidf("nil client")
	}
	kw, ok := c.d.(driver.KeyWatcher)
	if !ok {
		return nil, fmt.Errorf("dlock: the %T backend cannot watch its locks: %w", c.d, errors.ErrUnsupported)
	}
	return kw.WatchKey(ctx, key)
}
