package redislock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// DriverOption configures a Driver made by NewDriver.
type DriverOption func(*Driver) error

// WithReplicaAck makes every acquisition wait until n replicas have acknowledged
// its write (Redis WAIT n timeout, on the connection that wrote it) before it is
// granted. An acquisition that fewer replicas acknowledged within timeout is
// released and fails with an error matching dlock.ErrUnavailable, which Lock
// retries within its wait. It narrows the window of an asynchronous failover
// (Sentinel): a lock the master granted has reached a replica that can be
// promoted. It does not close it: Redis may still promote a replica that had
// not acknowledged, and WAIT does not make Redis strongly consistent; fencing
// remains the answer. The wait is part of the acquisition's round trip, so it
// comes off the lease's validity. It needs a *redis.Client (one master, or a
// Sentinel failover client); n must be positive and timeout at least a
// millisecond. The default is no wait.
func WithReplicaAck(n int, timeout time.Duration) DriverOption {
	return func(d *Driver) error {
		switch {
		case n < 1:
			return fmt.Errorf("%w: redislock: replica acknowledgements %d must be positive", dlock.ErrInvalid, n)
		case timeout < time.Millisecond:
			return fmt.Errorf("%w: redislock: replica acknowledgement timeout %v below 1ms", dlock.ErrInvalid, timeout)
		}
		if _, ok := d.c.rdb.(*redis.Client); !ok {
			return fmt.Errorf("%w: redislock: WithReplicaAck needs a *redis.Client (one master or a Sentinel failover client), not a %T", dlock.ErrInvalid, d.c.rdb)
		}
		d.ack, d.ackTimeout = n, timeout
		return nil
	}
}

// NewClient returns a Client over d (a Driver made with options), with opts as
// the defaults of every TryLock and Lock.
func NewClient(d *Driver, opts ...dlock.Option) (*Client, error) {
	if d == nil {
		return nil, fmt.Errorf("%w: nil driver", dlock.ErrInvalid)
	}
	return dlock.NewClient(d, opts...)
}

// checkAck releases a grant that fewer replicas than WithReplicaAck asks for
// acknowledged, and reports it.
func (d *Driver) checkAck(ctx context.Context, r driver.AcquireRequest, acked int64) error {
	if d.ack == 0 || acked >= int64(d.ack) {
		return nil
	}
	cctx, cancel := driver.CleanupContext(ctx)
	_, _ = d.drop(cctx, driver.Holding{Key: r.Key, Owner: r.Owner}, "0", "")
	cancel()
	return fmt.Errorf("%w: redislock: the acquisition reached %d of %d replicas within %v, and was released",
		dlock.ErrUnavailable, acked, d.ack, d.ackTimeout)
}
