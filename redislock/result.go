package redislock

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redisscript"
	"github.com/redis/go-redis/v9"
)

var (
	_ driver.ResultKeeper = (*Driver)(nil)
	_ driver.ResultKeeper = (*FairDriver)(nil)
)

// maxResult is the largest result of dlock.Once kept beside a lock.
const maxResult = 16 << 20

// PutResult implements driver.ResultKeeper: one script sets the result key
// beside the lock (dlock:{KEY}:result) if h's owner holds the lock.
func (d *Driver) PutResult(ctx context.Context, h driver.Holding, value []byte, ttl time.Duration) error {
	return d.c.putResult(ctx, h, value, ttl)
}

// GetResult implements driver.ResultKeeper: one GET.
func (d *Driver) GetResult(ctx context.Context, key string) ([]byte, bool, error) {
	return d.c.getResult(ctx, key)
}

// MaxResult implements driver.ResultKeeper.
func (d *Driver) MaxResult() int { return maxResult }

// PutResult implements driver.ResultKeeper, as Driver.PutResult.
func (d *FairDriver) PutResult(ctx context.Context, h driver.Holding, value []byte, ttl time.Duration) error {
	return d.c.putResult(ctx, h, value, ttl)
}

// GetResult implements driver.ResultKeeper, as Driver.GetResult.
func (d *FairDriver) GetResult(ctx context.Context, key string) ([]byte, bool, error) {
	return d.c.getResult(ctx, key)
}

// MaxResult implements driver.ResultKeeper.
func (d *FairDriver) MaxResult() int { return maxResult }

func (c *conn) putResult(ctx context.Context, h driver.Holding, value []byte, ttl time.Duration) error {
	n, err := redisscript.Result.Run(ctx, c.sc, []string{LockKey(h.Key), resultKey(h.Key)}, h.Owner, value, ttl.Milliseconds()).Int64()
	_, err = extendReply(h.Key, n, err, ttl)
	return err
}

func (c *conn) getResult(ctx context.Context, key string) ([]byte, bool, error) {
	v, err := c.w.get(ctx, resultKey(key))
	switch {
	case errors.Is(err, redis.Nil):
		return nil, false, nil
	case err != nil:
		return nil, false, mapErr(err)
	}
	return []byte(v), true, nil
}
