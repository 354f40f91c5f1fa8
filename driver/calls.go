package driver

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// errNoAnswer is the cause of a bounded call's context that its timeout ended.
var errNoAnswer = errors.New("request timeout")

// BoundCall bounds one call of a driver by a request timeout, so that a store
// that does not answer fails the call with ErrUnavailable whatever the caller's
// context allows. It returns ctx bounded by timeout, and done, which the call
// passes its error to when it returns: done releases the bound and maps the
// error. An error of a call that the timeout cut short (not the caller's
// context) becomes one matching ErrUnavailable that says store (a name for
// people, such as "etcd") did not answer in time, with the error's text; every
// other error is returned as it is.
//
//	ctx, done := driver.BoundCall(ctx, d.timeout, "etcd")
//	resp, err := d.cli.Get(ctx, key)
//	if err = done(err); err != nil {
//		return err
//	}
func BoundCall(ctx context.Context, timeout time.Duration, store string) (bctx context.Context, done func(error) error) {
	rctx, cancel := context.WithTimeoutCause(ctx, timeout, errNoAnswer)
	return rctx, func(err error) error {
		defer cancel()
		if err != nil && ctx.Err() == nil && errors.Is(context.Cause(rctx), errNoAnswer) {
			return fmt.Errorf("%w: %s did not answer within %v (%v)", ErrUnavailable, store, timeout, err)
		}
		return err
	}
}

// workerIdle is how long a worker of Go waits for its next call before it
// ends.
const workerIdle = 20 * time.Millisecond

// workerJobs hands a call of Go to a worker waiting for one.
var workerJobs = make(chan func())

// Go calls f on a goroutine other than the caller's, as a go statement does,
// and does not wait for f: on a worker that waits a while for the next call, or
// on a new one when none waits. It is for a driver's short blocking calls
// through a client library's deep call path: the worker that made one has grown
// its stack, and under load the next call runs on that stack instead of a new
// goroutine growing one anew. A worker ends once no call came for a few
// milliseconds.
func Go(f func()) {
	select {
	case workerJobs <- f:
	default:
		go work(f)
	}
}

// work is a worker of Go: it calls f, then each call handed to it, until none
// came for workerIdle.
func work(f func()) {
	f()
	t := time.NewTimer(workerIdle)
	defer t.Stop()
	for {
		select {
		case f := <-workerJobs:
			f()
			t.Reset(workerIdle)
		case <-t.C:
			return
		}
	}
}
