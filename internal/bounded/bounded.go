// Package bounded bounds one call of a driver by a request timeout, so that a
// store that does not answer fails the call with dlock.ErrUnavailable whatever
// the caller's context allows.
package bounded

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
)

// errNoAnswer is the cause of a call's context that its timeout ended.
var errNoAnswer = errors.New("request timeout")

// Call returns ctx bounded by timeout, and done, which the call passes its error
// to when it returns: done releases the bound and maps the error. An error of a
// call that the timeout cut short (not the caller's context) becomes one
// matching dlock.ErrUnavailable that says store did not answer in time, with the
// cause's text; every other error is returned as it is.
func Call(ctx context.Context, timeout time.Duration, store string) (context.Context, func(error) error) {
	rctx, cancel := context.WithTimeoutCause(ctx, timeout, errNoAnswer)
	return rctx, func(err error) error {
		defer cancel()
		if err != nil && ctx.Err() == nil && errors.Is(context.Cause(rctx), errNoAnswer) {
			return fmt.Errorf("%w: %s did not answer within %v (%v)", dlock.ErrUnavailable, store, timeout, err)
		}
		return err
	}
}
