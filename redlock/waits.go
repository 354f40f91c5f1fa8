package redlock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock/redislock"
)

// waits are the registrations of one waiting acquisition attempt with the
// nodes' drivers. A node's driver keeps a waiting attempt's place in the
// server's waiting set, and a wake-up it is sent, until the waiter subscribes
// or the attempt's context ends. That context is the caller's, not the node
// request's, which ends as soon as the node has answered: the waiter
// subscribes after the whole attempt has answered busy. The attempt's waits
// end once no subscription can follow (the attempt took the lock or failed
// otherwise, or the waiter subscribed, gave up, or tries again without having
// subscribed); a node that answered busy then lets its registration go.
type waits struct {
	caller context.Context

	mu      sync.Mutex
	ended   bool
	cancels []context.CancelFunc
}

// acquire runs r on node under a context that ends with the caller's or with
// w, and whose deadline, ctx's, bounds the request's network I/O (with
// go-redis's ContextTimeoutEnabled).
func (w *waits) acquire(ctx context.Context, node *redislock.Driver, r driver.AcquireRequest) (driver.Grant, error) {
	wctx, cancel := context.WithCancel(w.caller)
	dl, _ := ctx.Deadline()
	g, err := node.Acquire(waitCtx{Context: wctx, deadline: dl}, r)
	var busy *driver.Taken
	if !errors.As(err, &busy) {
		cancel() // the node's driver keeps nothing for a grant or a failure
		return g, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		cancel()
	} else {
		w.cancels = append(w.cancels, cancel)
	}
	return g, err
}

// end lets the nodes' registrations go (those not taken over by a
// subscription). It may be called more than once, and on a nil w.
func (w *waits) end() {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.ended = true
	cancels := w.cancels
	w.cancels = nil
	w.mu.Unlock()
	for _, c := range cancels {
		c()
	}
}

// waitCtx is the context of a waiting attempt on one node: it ends as its
// Context does, and its deadline, the node request's (or the caller's when
// sooner), bounds the network I/O of a go-redis client with
// ContextTimeoutEnabled.
type waitCtx struct {
	context.Context
	deadline time.Time
}

// Deadline returns the sooner of the node request's deadline and the caller's.
func (c waitCtx) Deadline() (time.Time, bool) {
	if dl, ok := c.Context.Deadline(); ok && dl.Before(c.deadline) {
		return dl, true
	}
	return c.deadline, true
}
