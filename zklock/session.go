package zklock

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/dlock-go/dlock/driver"
)

// errSessionExpired and errDriverClosed are the causes of a Grant.Lost.
var (
	errSessionExpired = errors.New("zklock: the ZooKeeper session expired, and its lock nodes with it")
	errDriverClosed   = errors.New("zklock: the driver was closed, which ended its session and its lock nodes")
)

// sessionWatch keeps the context that the holdings of the current session
// carry as their Grant.Lost: ended when the session expires (the client's
// StateExpired event, at its first contact with the server after the expiry)
// or the Driver closes.
type sessionWatch struct {
	mu     sync.Mutex
	id     int64 // the session ctx belongs to; 0 for none
	ctx    context.Context
	cancel context.CancelCauseFunc
	closed error // set once the Driver is closed
}

// lost returns the context that ends when session id does: id is the session
// a node was found to belong to, current the connection's session now. A
// session that is no longer current has ended already.
func (s *sessionWatch) lost(id, current int64) context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx == nil || s.id != id {
		if id == 0 || id != current || s.closed != nil {
			ctx, cancel := context.WithCancelCause(context.Background())
			cancel(fmt.Errorf("%w (session %#x)", errSessionExpired, id))
			return ctx
		}
		if s.cancel != nil {
			s.cancel(errSessionExpired) // an older session, no longer current
		}
		s.id = id
		s.ctx, s.cancel = context.WithCancelCause(context.Background())
	}
	return s.ctx
}

// end ends the current session's context with cause.
func (s *sessionWatch) end(cause error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel != nil {
		s.cancel(fmt.Errorf("%w (session %#x)", cause, s.id))
	}
	s.id, s.ctx, s.cancel = 0, nil, nil
	if errors.Is(cause, errDriverClosed) {
		s.closed = cause
	}
}

// request bounds one call of the Driver by the request timeout: a call cut
// short by it (not by the caller's context) is the server not answering,
// dlock.ErrUnavailable. The call passes its error through done.
func (d *Driver) request(ctx context.Context) (context.Context, func(error) error) {
	return driver.BoundCall(ctx, d.reqTimeout, "ZooKeeper")
}
