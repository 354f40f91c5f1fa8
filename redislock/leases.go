package redislock

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock/internal/redisscript"
)

// The locks with several holders (NewSemaphore, NewRWMutex) keep, besides the
// lock hash LockKey (its kind's fields, and each holder's fencing token and
// metadata), the holders' leases in the sorted set "dlock:{KEY}:holders":
// owner -> the server time in milliseconds at which its lease ends. Every script first drops the
// leases that ended, so a crashed holder's share comes back at its TTL. Both
// keys expire with the last lease.

// multiHolder is the part of a driver of a lock with several holders that does not
// depend on its kind: extend, TTL and inspection. The drivers embed it.
type multiHolder struct {
	inspection
	c      *conn
	marker string // the lock hash field that marks the kind
}

func newMultiHolder(c *conn, marker string) multiHolder {
	l := multiHolder{c: c, marker: marker}
	l.inspection = inspection{c: c, k: l.kind()}
	return l
}

// Extend implements driver.Driver.
func (l multiHolder) Extend(ctx context.Context, h driver.Holding, ttl time.Duration) (time.Duration, error) {
	n, err := redisscript.LeaseExtend.Run(ctx, l.c.sc, leaseKeys(h.Key, h.Owner), h.Owner, ttl.Milliseconds(), l.marker).Int64()
	if err != nil {
		return 0, mapErr(err)
	}
	if n != 1 {
		return 0, notHeld(h.Key)
	}
	return ttl, nil
}

// TTL implements driver.Driver.
func (l multiHolder) TTL(ctx context.Context, h driver.Holding) (time.Duration, error) {
	n, err := redisscript.LeaseTTL.Run(ctx, l.c.sc, leaseKeys(h.Key, h.Owner), h.Owner, l.marker).Int64()
	if err != nil {
		return 0, mapErr(err)
	}
	if n < 0 {
		return 0, notHeld(h.Key)
	}
	return time.Duration(n) * time.Millisecond, nil
}

// kind returns the inspection of the lock kind.
func (l multiHolder) kind() kind {
	name, keys := driver.KindReadWrite, rwKeys
	if l.marker == semMarker {
		name, keys = driver.KindSemaphore, leaseKeys
	}
	return kind{
		name:   name,
		script: redisscript.LeaseInspect,
		keys:   func(key string) []string { return keys(key, "") },
		args:   []any{l.marker},
		reply: func(key string, res []any, err error) (LockInfo, error) {
			return leaseReply(key, res, err, l.marker == semMarker)
		},
		force: func(ctx context.Context, key string, _ LockInfo) error {
			err := redisscript.LeaseForce.Run(ctx, l.c.sc, leaseKeys(key, ""), l.marker, l.c.hub.publishCmd(), wakeChannel(key)).Err()
			return mapErr(err)
		},
	}
}
