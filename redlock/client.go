package redlock

import (
	"fmt"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/redis/go-redis/v9"
)

// Client is the dlock.Client a redlock constructor returns: a dlock.Locker over
// N independent Redis masters, and a driver.Inspector through its Driver. It is
// safe for concurrent use.
type Client = dlock.Client

// New returns a Client that locks on a majority of nodes (see NewDriver for what
// nodes must be), with opts as the defaults of every TryLock and Lock. It returns
// an error matching dlock.ErrInvalid for bad nodes or a bad option; it does no
// I/O.
func New(nodes []redis.UniversalClient, opts ...dlock.Option) (*dlock.Client, error) {
	d, err := NewDriver(nodes)
	if err != nil {
		return nil, err
	}
	return NewClient(d, opts...)
}

// NewClient returns a Client over d, with opts as the defaults of every TryLock
// and Lock.
func NewClient(d *Driver, opts ...dlock.Option) (*dlock.Client, error) {
	if d == nil {
		return nil, fmt.Errorf("%w: redlock: nil driver", driver.ErrInvalid)
	}
	return dlock.NewClient(d, opts...)
}
