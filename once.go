package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// Defaults of a Once.
const (
	defaultResultTTL = time.Minute
	defaultMaxResult = 1 << 20
)

// Result tags: the first byte of a stored result.
const (
	resultValue byte = 'v' // the computation's value follows
	resultError byte = 'e' // its error's text follows (ShareErrors)
)

// Once computes a value once for every caller of a key, in every process: a
// distributed singleflight. The first caller of Do takes the key's lock,
// computes under it, stores the result in the lock's store for ResultTTL and
// releases; every other caller waits for the lock (woken by the store, as any
// waiting Lock is) and returns the stored result without computing. If the
// computer dies, or loses its lock, before it stores a result, one waiter
// takes the lock and computes in its place. So a value is computed at most once
// per result window, unless its computer died or lost its lock, and every
// caller gets a value that one computation produced.
//
// An error of the computation is not shared unless ShareErrors is set: the
// computer returns it, releases the lock, and the next waiter computes. A
// result above MaxSize is refused with an error matching ErrInvalid and is
// not stored.
//
// The Client's backend must keep results (driver.ResultKeeper: the Redis plain
// and fair locks and memlock); Do returns an error matching
// errors.ErrUnsupported otherwise. The zero value of the other fields is the
// default. A Once is a value: copy it freely; it is safe for concurrent use.
type Once struct {
	// Client takes the keys' locks and keeps the results.
	Client *Client
	// ResultTTL is how long a result is kept and handed out (1 minute by
	// default): a Do after it computes again.
	ResultTTL time.Duration
	// MaxSize is the largest result kept, in bytes (1 MiB by default; at most
	// the backend's own limit, driver.ResultKeeper.MaxResult).
	MaxSize int
	// ShareErrors has an error of the computation stored (its text) and
	// returned to the callers of the result window, instead of computing
	// again: an error that names the key and carries the text.
	ShareErrors bool
	// Options are the options of the lock taken for each computation (WithTTL,
	// WithWait, WithRetry...): by default a renewed lease, and a wait bounded
	// by ctx alone.
	Options []Option
}

// Do returns key's result: the stored one, or the one fn computes under the
// key's lock (fn's context ends if the lock is lost). It returns ctx's error
// when ctx ends first, fn's error when this call computed and fn failed (or a
// shared error's text, with ShareErrors), and an error matching ErrInvalid for
// a nil Client or fn, a bad key, a negative ResultTTL or MaxSize, a
// ResultTTL below a millisecond, or a
// MaxSize above the backend's, before any I/O.
func (o Once) Do(ctx context.Context, key string, fn func(ctx context.Context) ([]byte, error)) ([]byte, error) {
	rk, err := o.check(ctx, key, fn)
	if err != nil {
		return nil, err
	}
	if v, ok, err := o.stored(ctx, rk, key); ok || err != nil {
		return v, err
	}
	lease, err := o.Client.Lock(ctx, key, o.Options...)
	if err != nil {
		return nil, err
	}
	defer func() { _ = lease.Unlock(ctx) }() // an ended ctx: Unlock still releases, on a short bounded context
	// A computation that ended while this caller waited left its result.
	if v, ok, err := o.stored(ctx, rk, key); ok || err != nil {
		return v, err
	}
	v, ferr := fn(lease.Context())
	limit := o.maxSize()
	switch {
	case ferr != nil && !o.ShareErrors:
		return nil, ferr
	case ferr != nil:
		return nil, errors.Join(ferr, o.put(lease, rk, resultError, []byte(ferr.Error())))
	case len(v) > limit:
		return nil, invalidf("the result of %q is %d bytes, more than the Once's MaxSize of %d: not kept", key, len(v), limit)
	}
	if err := o.put(lease, rk, resultValue, v); err != nil {
		return nil, err
	}
	return v, nil
}

// check validates o and the call, and returns the Client's ResultKeeper.
func (o Once) check(ctx context.Context, key string, fn func(context.Context) ([]byte, error)) (driver.ResultKeeper, error) {
	switch {
	case o.Client == nil:
		return nil, invalidf("Once without a Client")
	case ctx == nil:
		return nil, invalidf("nil context")
	case fn == nil:
		return nil, invalidf("nil function")
	case o.ResultTTL < 0 || o.MaxSize < 0:
		return nil, invalidf("Once with a negative ResultTTL (%v) or MaxSize (%d)", o.ResultTTL, o.MaxSize)
	case o.ResultTTL > 0 && o.ResultTTL < time.Millisecond:
		return nil, invalidf("Once's ResultTTL %v below a millisecond, the stores' unit", o.ResultTTL)
	}
	if err := driver.ValidateKey(key); err != nil {
		return nil, err
	}
	rk, ok := o.Client.d.(driver.ResultKeeper)
	if !ok {
		return nil, fmt.Errorf("dlock: the %s %s lock keeps no results for Once: %w", o.Client.info.Backend, o.Client.info.Kind, errors.ErrUnsupported)
	}
	if m := rk.MaxResult() - 1; o.maxSize() > m {
		return nil, invalidf("Once's MaxSize %d above the %s backend's %d", o.maxSize(), o.Client.info.Backend, m)
	}
	return rk, nil
}

func (o Once) maxSize() int {
	if o.MaxSize == 0 {
		return defaultMaxResult
	}
	return o.MaxSize
}

func (o Once) resultTTL() time.Duration {
	if o.ResultTTL == 0 {
		return defaultResultTTL
	}
	return o.ResultTTL
}

// stored returns key's stored result, if there is one: its value, or its
// shared error.
func (o Once) stored(ctx context.Context, rk driver.ResultKeeper, key string) ([]byte, bool, error) {
	v, ok, err := rk.GetResult(ctx, key)
	switch {
	case err != nil:
		return nil, false, err
	case !ok:
		return nil, false, nil
	case len(v) > 0 && v[0] == resultValue:
		return v[1:], true, nil
	case len(v) > 0 && v[0] == resultError:
		return nil, true, &sharedError{key: key, msg: string(v[1:])}
	}
	return nil, false, fmt.Errorf("%w: the result of %q is not one Once stored", ErrConflict, key)
}

// put stores the result tag+v of lease's key, owner-checked.
func (o Once) put(lease *Lease, rk driver.ResultKeeper, tag byte, v []byte) error {
	b := make([]byte, 1+len(v))
	b[0] = tag
	copy(b[1:], v)
	ctx := lease.Context()
	err := rk.PutResult(ctx, lease.holding(lease.currentTTL()), b, o.resultTTL())
	if err != nil && lease.Err() != nil {
		return lease.Err() // the lock was lost: the result is nobody's
	}
	return err
}

// sharedError is an error of another caller's computation, stored with
// ShareErrors.
type sharedError struct{ key, msg string }

func (e *sharedError) Error() string {
	return fmt.Sprintf("dlock: the computation of %q failed (shared result): %s", e.key, e.msg)
}
