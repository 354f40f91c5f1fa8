package redislock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/redis/go-redis/v9"
)

// Option configures a driver (NewDriver, and the drivers of the other kinds:
// NewFairDriver, NewSemaphoreDriver, NewReentrantDriver).
type Option func(*options)

// options is what the Options of a driver set.
type options struct {
	ack        int           // replicas that must acknowledge an acquisition (WithReplicaAck)
	ackTimeout time.Duration // how long to wait for them
	ackSet     bool
}

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
// millisecond. The default is no wait. It applies to the plain lock
// (NewDriver): the driver of another kind refuses it.
func WithReplicaAck(n int, timeout time.Duration) Option {
	return func(o *options) { o.ack, o.ackTimeout, o.ackSet = n, timeout, true }
}

// newOptions applies opts for a driver over rdb of the named kind ("" for
// the plain lock) and checks them: an error matching dlock.ErrInvalid for a
// nil or bad option, or one the kind does not take.
func newOptions(rdb redis.UniversalClient, kind string, opts []Option) (options, error) {
	var o options
	for _, opt := range opts {
		if opt == nil {
			return o, fmt.Errorf("%w: redislock: nil driver option", driver.ErrInvalid)
		}
		opt(&o)
	}
	if !o.ackSet {
		return o, nil
	}
	switch {
	case kind != "":
		return o, fmt.Errorf("%w: redislock: WithReplicaAck applies to the plain lock, not to %s", driver.ErrInvalid, kind)
	case o.ack < 1:
		return o, fmt.Errorf("%w: redislock: replica acknowledgements %d must be positive", driver.ErrInvalid, o.ack)
	case o.ackTimeout < time.Millisecond:
		return o, fmt.Errorf("%w: redislock: replica acknowledgement timeout %v below 1ms", driver.ErrInvalid, o.ackTimeout)
	}
	if rdb == nil {
		return o, fmt.Errorf("%w: WithReplicaAck", ErrTransportUnsupported)
	}
	if _, ok := rdb.(*redis.Client); !ok {
		return o, fmt.Errorf("%w: redislock: WithReplicaAck needs a *redis.Client (one master or a Sentinel failover client), not a %T", driver.ErrInvalid, rdb)
	}
	return o, nil
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
		driver.ErrUnavailable, acked, d.ack, d.ackTimeout)
}
