package dlock

import (
	"context"
	"errors"
)

// Do takes key with l.Lock, runs fn, and always unlocks: when fn returns, when it
// panics (the lock is released and the panic goes on), and when it ends its
// goroutine with runtime.Goexit (as t.FailNow does). fn receives a context that is
// cancelled when ctx is, or when the lock is lost (its cause is then ErrLockLost):
// fn should stop its protected work when it ends. Do returns fn's error joined with
// any error from Unlock; a lock lost while fn ran makes Do return an error matching
// ErrLockLost even when fn succeeded.
func Do(ctx context.Context, l Locker, key string, fn func(ctx context.Context) error, opts ...Option) (err error) {
	if isNil(l) {
		return invalidf("nil locker")
	}
	if fn == nil {
		return invalidf("nil function")
	}
	if ctx == nil {
		return invalidf("nil context")
	}
	lease, err := l.Lock(ctx, key, opts...)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(lease.Context(), func() { cancel(context.Cause(lease.Context())) })
	var ferr error
	returned := false
	defer func() {
		stop()
		cancel(nil)
		// Runs on every way out of fn; a panic continues once the lock is released.
		uerr := lease.Unlock(ctx)
		if !returned {
			return
		}
		if errors.Is(uerr, ErrLockLost) && errors.Is(ferr, ErrLockLost) {
			uerr = nil // already reported by fn
		}
		err = errors.Join(ferr, uerr)
	}()
	ferr = fn(fctx)
	returned = true
	return nil
}
