package main

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// failureLog keeps the last failure of a server's lock operations since the last
// success, so that a waiting run can say what it is waiting for: a server that
// answers but refuses every write (out of memory, loading, read-only...) looks
// like a busy lock from outside.
type failureLog struct {
	mu   sync.Mutex
	err  error
	hide []string // the server URLs, whose secrets never reach a message
}

// note records err, or clears the record when err is nil.
func (f *failureLog) note(err error) {
	if f == nil {
		return
	}
	f.mu.Lock()
	f.err = err
	f.mu.Unlock()
}

// last returns the failure recorded since the last success, as a message
// without secrets, or "".
func (f *failureLog) last() string {
	if f == nil {
		return ""
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		return ""
	}
	msg := oneLine(f.err)
	if i := strings.Index(msg, " script: "); i > 0 {
		msg = msg[:i] // the script's SHA and line: nothing for the reader
	}
	for _, u := range f.hide {
		msg = redact(msg, u)
	}
	return msg
}

// failureHook is a go-redis hook that records in log the failures of the
// commands that take, renew and release locks (scripts), and of dials.
type failureHook struct{ log *failureLog }

func (h failureHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil && ctx.Err() == nil {
			h.log.note(err)
		}
		return c, err
	}
}

func (h failureHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.observe(ctx, cmd.Name(), err)
		return err
	}
}

func (h failureHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			h.observe(ctx, c.Name(), c.Err())
		}
		return err
	}
}

// observe records the outcome of one command: a script that ran clears the
// record; a failure other than a missing script (loaded next) or the caller's
// own context ending is recorded.
func (h failureHook) observe(ctx context.Context, name string, err error) {
	switch {
	case err == nil:
		if strings.HasPrefix(name, "eval") || strings.HasPrefix(name, "fcall") {
			h.log.note(nil)
		}
	case errors.Is(err, redis.Nil), ctx.Err() != nil,
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
	case strings.HasPrefix(err.Error(), "NOSCRIPT"):
	default:
		h.log.note(err)
	}
}
