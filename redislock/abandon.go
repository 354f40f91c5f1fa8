package redislock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/redis/go-redis/v9"
)

// An abandon mark is needed only where an attempt of the abandoned acquisition
// may still reach the server: one whose reply never came back (cut short by the
// context, or lost with its connection). An acquisition whose every attempt was
// answered leaves nothing in the store that its Abandon does not remove, and
// gets no mark: a storm of waiters giving up leaves marks only for the attempts
// it cut short, and each lives as long as a holding that attempt could take
// (see markTTL), not longer.
//
// The first answered busy reply of a waiting acquisition gives it an *attempts
// as its Handle, which its later attempts and its Abandon receive; attempts
// made before that (no Handle yet) that went unanswered are remembered in
// flights. An Abandon that knows nothing of the acquisition (no Handle) marks
// it.

// An attempt cut short by its context's end is what needs a mark, and in a
// storm of waiters giving up most attempts end that way: their reply was on its
// way. So the script call of an attempt runs on graced, which ends replyGrace
// after the caller's context: a reply that comes back within it is read (the
// attempt is answered and needs no mark), and the core, which watches the
// caller's context, gives up as before.

// replyGrace is how long an attempt's script call may outlive its caller's
// context to read a reply on its way.
const replyGrace = 50 * time.Millisecond

// graced returns the context of an attempt's script call: ctx's values, ending
// replyGrace after ctx ends (by its deadline or by a cancel). A ctx that never
// ends is returned as it is. The stop function releases its resources.
func graced(ctx context.Context) (context.Context, func()) {
	if ctx.Done() == nil {
		return ctx, noStop
	}
	var gctx context.Context
	var cancel context.CancelFunc
	if dl, ok := ctx.Deadline(); ok {
		gctx, cancel = context.WithDeadline(context.WithoutCancel(ctx), dl.Add(replyGrace))
	} else {
		gctx, cancel = context.WithCancel(context.WithoutCancel(ctx))
	}
	var late atomic.Pointer[time.Timer]
	stop := context.AfterFunc(ctx, func() {
		late.Store(time.AfterFunc(replyGrace, cancel))
	})
	return gctx, func() {
		stop()
		cancel()
		if t := late.Load(); t != nil {
			t.Stop()
		}
	}
}

func noStop() {}

// Most attempts that a storm of waiters cuts short were never sent: they
// waited for a connection of go-redis's pool when their context ended. go-redis
// ends a call with its context's bare error only while it waits for a
// connection or before a retry. A retry follows a reply, a connection that
// broke (nothing sent on it can reach the server any more), a failed write (a
// command cut short is not run), or a read timeout: then the command may still
// be on its way. A read timeout comes from the context's deadline when the
// client lets contexts set socket deadlines (ContextTimeoutEnabled), and
// otherwise after the client's read timeout. So an attempt that ended with its
// context's bare error, on a client that makes no retries or sooner than a
// read timeout can come, was not sent or can no longer land: it returns
// driver.ErrNotSent too, and needs no Abandon and no mark.

// quietFor returns conn.quiet for rdb: forever for a client that makes no
// retries; its read timeout when contexts set no socket
// deadlines; otherwise (and for other kinds of client) 0, as a bare context
// error then tells nothing.
func quietFor(rdb redis.UniversalClient) time.Duration {
	var read time.Duration
	switch c := rdb.(type) {
	case *redis.Client:
		o := c.Options()
		if o.MaxRetries <= 0 { // -1 (none) reads as 0 once the client is made
			return time.Duration(math.MaxInt64)
		}
		if o.ContextTimeoutEnabled {
			return 0
		}
		read = o.ReadTimeout
	case *redis.ClusterClient:
		o := c.Options()
		if o.MaxRetries <= 0 && o.MaxRedirects <= 0 {
			return time.Duration(math.MaxInt64)
		}
		if o.ContextTimeoutEnabled {
			return 0
		}
		read = o.ReadTimeout
	default:
		return 0
	}
	switch {
	case read == 0:
		return 3 * time.Second // go-redis's default
	case read < 0:
		return time.Duration(math.MaxInt64) // no read timeout
	}
	return read
}

// notSent adds driver.ErrNotSent to err, the failure of an attempt that took
// took, when the attempt left nothing in flight (see quietFor).
func (c *conn) notSent(err error, took time.Duration) error {
	if err == nil || took >= c.quiet || !(errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return err
	}
	var op *net.OpError
	if errors.As(err, &op) || errors.Is(err, os.ErrDeadlineExceeded) {
		return err // a socket deadline: the command may be on its way
	}
	return fmt.Errorf("%w (%w)", err, driver.ErrNotSent)
}

// attempts is the driver's Handle of a waiting acquisition.
type attempts struct {
	unanswered atomic.Bool // an attempt's reply never came back
}

// flights remembers the acquisitions (key and owner) without a Handle that
// sent an attempt whose reply never came back.
type flights struct {
	mu sync.Mutex
	m  map[flightKey]time.Time // when the last unanswered attempt was sent
}

type flightKey struct{ key, owner string }

// flightSweep is the size at which noting a flight first forgets the flights
// older than maxFlight, which no acquisition abandoned (a driver used without a
// dlock.Client).
const (
	flightSweep = 4096
	maxFlight   = 10 * time.Minute
)

// answered reports whether err is the outcome of an attempt whose reply came
// back (or that was never sent): a reply of the server, or a refusal before any
// I/O. Network and context errors are not, nor are the server's "not now"
// replies (dlock.ErrUnavailable, indistinguishable from a network failure once
// mapped): those mark, which is safe.
func answered(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply) || errors.Is(err, driver.ErrNotSent) || errors.Is(err, driver.ErrInvalid) || errors.Is(err, driver.ErrNotObtained) ||
		errors.Is(err, driver.ErrNotHeld) || errors.Is(err, driver.ErrConflict) || errors.Is(err, driver.ErrRefused)
}

// sent records the outcome err of an attempt of r: it hands a waiting
// acquisition's first busy reply its Handle, and notes an unanswered attempt.
func (f *flights) sent(r driver.AcquireRequest, err error) {
	if err == nil {
		if r.Handle == nil {
			f.forget(r.Key, r.Owner)
		}
		return
	}
	f.failed(r, err)
}

// failed is sent for an attempt that failed with err.
func (f *flights) failed(r driver.AcquireRequest, err error) {
	var busy *driver.Taken
	switch {
	case errors.As(err, &busy):
		if r.Handle == nil && busy.Handle == nil && r.Waiting {
			busy.Handle = &attempts{}
		}
	case answered(err):
	default:
		if a, ok := r.Handle.(*attempts); ok {
			a.unanswered.Store(true)
			return
		}
		now := time.Now()
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.m == nil {
			f.m = make(map[flightKey]time.Time)
		}
		if len(f.m) >= flightSweep {
			for k, at := range f.m {
				if now.Sub(at) > maxFlight {
					delete(f.m, k)
				}
			}
		}
		f.m[flightKey{r.Key, r.Owner}] = now
	}
}

// forget drops what flights remembers of owner's acquisition of key, and
// reports whether it had an unanswered attempt.
func (f *flights) forget(key, owner string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.m) == 0 {
		return false
	}
	_, ok := f.m[flightKey{key, owner}]
	delete(f.m, flightKey{key, owner})
	return ok
}

// mark returns the lifetime (ms, decimal) of the abandon mark of h's abandoned
// acquisition, or "0" (no mark) when every attempt of it was answered.
func (f *flights) mark(h driver.Holding) string {
	flew := f.forget(h.Key, h.Owner)
	if a, ok := h.Handle.(*attempts); ok && !flew && !a.unanswered.Load() {
		return "0"
	}
	return strconv.FormatInt(markTTL(h.TTL), 10)
}
