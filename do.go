package dlock

import (
	"context"
	"errors"

	"github.com/dlock-go/dlock/driver"
)

// Do takes key with l.Lock, runs fn, and always unlocks: when fn returns, when it
// panics (the lock is released and the panic goes on), and when it ends its
// goroutine with runtime.Goexit (as t.FailNow does). fn receives a context that is
// cancelled when ctx is, or when the lock is lost (its cause is then ErrLockLost):
// fn should stop its protected work when it ends. Do returns fn's error joined with
// any error from Unlock; a lock lost while fn ran makes Do return an error matching
// ErrLockLost even when fn succeeded.
func Do(ctx context.Context, l Locker, key string, fn func(ctx context.Context) error, opts ...Option) error {
	if err := checkRun(ctx, l, fn); err != nil {
		return err
	}
	lease, err := l.Lock(ctx, key, opts...)
	if err != nil {
		return err
	}
	ferr, uerr := runHeld(ctx, lease, fn)
	if errors.Is(uerr, ErrLockLost) && errors.Is(ferr, ErrLockLost) {
		uerr = nil // already reported by fn
	}
	return errors.Join(ferr, uerr)
}

// checkRun checks the arguments of Do and RunAsLeader that their locking does
// not check.
func checkRun(ctx context.Context, l Locker, fn func(ctx context.Context) error) error {
	switch {
	case driver.IsNil(l):
		return invalidf("nil locker")
	case fn == nil:
		return invalidf("nil function")
	case ctx == nil:
		return invalidf("nil context")
	}
	return nil
}

// runHeld runs fn under a context that is cancelled when ctx is, or when the
// lease ends (with the lease's cause), and unlocks the lease on every way out
// of fn: when it returns (uerr is Unlock's error), when it panics (the panic
// goes on once the lock is released) and when it ends its goroutine.
func runHeld(ctx context.Context, lease *Lease, fn func(ctx context.Context) error) (ferr, uerr error) {
	fctx, cancel := context.WithCancelCause(ctx)
	lctx := lease.Context()
	stop := context.AfterFunc(lctx, func() { cancel(context.Cause(lctx)) })
	defer func() {
		stop()
		cancel(nil)
		uerr = lease.Unlock(ctx)
	}()
	return fn(fctx), nil
}
