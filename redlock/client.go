package redlock

import (
	"context"
	"fmt"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// Client is a dlock.Locker over N independent Redis masters. Create it with New
// (default node timeouts) or NewClient (over a Driver made with options); it is
// safe for concurrent use, and it is also a dlock.Inspector.
type Client struct {
	*dlock.Client
	d *Driver
}

var _ dlock.Inspector = (*Client)(nil)

// New returns a Client that locks on a majority of nodes (see NewDriver for what
// nodes must be), with opts as the defaults of every TryLock and Lock. It returns
// an error matching dlock.ErrInvalid for bad nodes or a bad option; it does no
// I/O.
func New(nodes []redis.UniversalClient, opts ...dlock.Option) (*Client, error) {
	d, err := NewDriver(nodes)
	if err != nil {
		return nil, err
	}
	return NewClient(d, opts...)
}

// NewClient returns a Client over d, with opts as the defaults of every TryLock
// and Lock.
func NewClient(d *Driver, opts ...dlock.Option) (*Client, error) {
	if d == nil {
		return nil, fmt.Errorf("%w: redlock: nil driver", dlock.ErrInvalid)
	}
	dc, err := dlock.NewClient(d, opts...)
	if err != nil {
		return nil, err
	}
	return &Client{Client: dc, d: d}, nil
}

// Inspect reads the lock named key on every node and returns the majority's
// view; see Driver.Inspect.
func (c *Client) Inspect(ctx context.Context, key string) (dlock.LockInfo, error) {
	if c == nil {
		return dlock.LockInfo{}, fmt.Errorf("%w: nil client", dlock.ErrInvalid)
	}
	return c.d.Inspect(ctx, key)
}

// List returns the locks whose names match pattern that a majority holds; see
// Driver.List.
func (c *Client) List(ctx context.Context, pattern string) ([]dlock.LockInfo, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil client", dlock.ErrInvalid)
	}
	return c.d.List(ctx, pattern)
}

// ForceUnlock removes the lock named key on every node; see Driver.ForceUnlock.
func (c *Client) ForceUnlock(ctx context.Context, key string) (dlock.LockInfo, error) {
	if c == nil {
		return dlock.LockInfo{}, fmt.Errorf("%w: nil client", dlock.ErrInvalid)
	}
	return c.d.ForceUnlock(ctx, key)
}
