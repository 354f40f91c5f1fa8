package pglock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/jackc/pgx/v5"
)

// dlock.Once keeps its result beside the lock, in the key's row of the
// locks' table (columns result and result_until), which outlives the holding
// that wrote it: the row stays when the lock is released, and the sweep keeps
// it while its result lives.

// maxResult is the largest result a Driver keeps.
const maxResult = 16 << 20

var (
	_ driver.ResultKeeper = (*Driver)(nil)
	_ driver.ResultKeeper = (*FairDriver)(nil)
)

// PutResult implements driver.ResultKeeper: one statement, which writes the
// result only if h's owner holds the key.
func (d *Driver) PutResult(ctx context.Context, h driver.Holding, value []byte, ttl time.Duration) error {
	if len(value) > maxResult {
		return fmt.Errorf("%w: pglock: a result of %d bytes, more than %d", driver.ErrInvalid, len(value), maxResult)
	}
	if value == nil {
		value = []byte{} // a stored result is never NULL
	}
	var ok bool
	err := d.do(ctx, "store the result", func(ctx context.Context) error {
		return d.pool.QueryRow(ctx, d.q.putResult, h.Key, h.Owner, value, micros(ttl)).Scan(&ok)
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return notHeld(h.Key)
	case err != nil:
		return err
	}
	return nil
}

// GetResult implements driver.ResultKeeper.
func (d *Driver) GetResult(ctx context.Context, key string) ([]byte, bool, error) {
	var value []byte
	err := d.do(ctx, "read the result", func(ctx context.Context) error {
		return d.pool.QueryRow(ctx, d.q.getResult, key).Scan(&value)
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, false, nil
	case err != nil:
		return nil, false, err
	}
	return value, true, nil
}

// MaxResult implements driver.ResultKeeper.
func (d *Driver) MaxResult() int { return maxResult }

// PutResult implements driver.ResultKeeper: a fair lock's holder is the
// owner of the key's row in the locks' table, as a mutex's is.
func (f *FairDriver) PutResult(ctx context.Context, h driver.Holding, value []byte, ttl time.Duration) error {
	if f == nil {
		return errNilDriver
	}
	return f.d.PutResult(ctx, h, value, ttl)
}

// GetResult implements driver.ResultKeeper.
func (f *FairDriver) GetResult(ctx context.Context, key string) ([]byte, bool, error) {
	if f == nil {
		return nil, false, errNilDriver
	}
	return f.d.GetResult(ctx, key)
}

// MaxResult implements driver.ResultKeeper.
func (f *FairDriver) MaxResult() int { return maxResult }
