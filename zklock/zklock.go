// Package zklock is dlock's ZooKeeper backend: a dlock.Driver that keeps locks as
// ephemeral sequential znodes, the lock recipe of the ZooKeeper documentation made
// safe against lost replies. It lives in a module of its own, so that programs
// that use only the Redis backend never build the ZooKeeper client.
//
//	drv, err := zklock.NewDriver(ctx, []string{"zk1:2181", "zk2:2181", "zk3:2181"})
//	if err != nil { ... }
//	defer drv.Close() // ends the session: every lock it holds is released
//	locker, err := zklock.New(drv)
//	lease, err := locker.Lock(ctx, "orders:42")
//
// # Layout
//
// A lock named key is the znode Root/<key escaped> (see WithRoot; the escape
// keeps a key with '/' in one path component). It is a container node: the
// server removes it some time after its last child has gone. Each contender
// creates an ephemeral sequential child lock-<owner>-<sequence>, whose data holds
// the requested TTL and the metadata. The child with the lowest sequence holds
// the lock; every other waits for the deletion of the child just before its own
// (a watch on its predecessor only, so a release wakes one waiter, not all of
// them, and a waiter that gives up moves its successor's watch without waking
// it). The watches survive reconnects, so a waiter polls only once a session
// timeout (BusyError.RetryAfter). TryLock does not queue: it reads the queue
// and creates nothing when the lock is held; on a free lock it creates its
// child, and deletes it again at once when another came first.
//
// # Fencing tokens
//
// The token of a holding is its child's czxid, the transaction id of the create:
// ZooKeeper's zxids increase strictly across the whole ensemble, also across
// leader elections, and a later holder's child was created after every earlier
// holder's. The sequence number in the child's name would not do: it is a
// counter of the parent node, and starts again at 0 when the (container) parent
// is removed and made again, and it is a signed 32-bit number.
//
// # TTL and the session
//
// ZooKeeper has no TTL per lock: an ephemeral node lives as long as the session
// that created it. A Driver has one session, with the timeout set by
// WithSessionTimeout and negotiated with the server, which clamps it into its
// [minSessionTimeout, maxSessionTimeout] (by default 2 and 20 ticks). The lock
// TTL maps onto it like this:
//
//   - A TTL can be at most the negotiated session timeout (TTLLimits). The
//     server expires a session only when it has heard nothing from the client for
//     the timeout, and every Acquire and Extend is a request in the session, so
//     a child lives at least the session timeout after the start of the call
//     that granted its TTL: the holder's local deadline (start + TTL − drift)
//     comes first, also when the holder is paused or cut off.
//   - A TTL shorter than the session timeout bounds how long the holder may
//     trust the lock without renewing it, as on every backend: at the local
//     deadline the lease ends and the Client deletes the child. Extend rewrites
//     the child's data (the new TTL), which succeeds only while the child exists
//     and the session is alive, and the write's time is what other clients use
//     to tell the TTL left (BusyError.Remaining, TTL, Inspect).
//   - A holder that crashes or stops answering blocks the lock for its TTL,
//     not for the session timeout: a node whose last write (its mtime) is
//     more than its TTL ago is dead, and the next attempt of another owner
//     that finds it first in the queue deletes it (unless it was written in
//     between). Both times come from the server's clock: the attempt learns
//     the server's time from a write of its own (the lock node's mtime), so
//     the clocks of the clients do not matter, only that the servers of the
//     ensemble agree on the time (within the drift margin), since a new leader
//     stamps writes with its own clock. The holder's local deadline comes
//     first, as on every backend: it counts from before the write. Waiters
//     rewrite their own node at every attempt (at least every third of their
//     TTL), so a live waiter's node is never taken for a dead one, and the
//     node of a waiter that died goes the same way. A holder that closes its
//     Driver frees its locks at once, and the session timeout still bounds
//     every node, also one whose data is not dlock's.
//   - A session that expires takes its nodes with it: the holder's Lease is
//     lost as soon as the client hears of the expiry (at its first contact
//     with the server after it), not at its next renewal (dlock.Grant.Lost).
//
// dlock.DefaultTTL (15s, renewed) needs a session timeout of at least 15s, the
// default of WithSessionTimeout; a server clamps it lower only with a tick under
// 750ms or an explicit maxSessionTimeout. Give a shorter dlock.WithTTL then.
//
// # Lost replies
//
// A create whose reply is lost (ZOOKEEPER-1262) must not leave an orphan that
// holds the lock for the life of the session. The owner token is in the child's
// name, as in Curator's protected mode: a retry with the same owner finds the
// child it made, and a Release or Abandon finds and deletes it. When even that
// cannot reach the server, the Driver remembers the owner and deletes its
// children as soon as the session is connected again.
//
// # Client
//
// The Go client is github.com/go-zookeeper/zk (v1.0.4), the maintained
// successor of samuel/go-zookeeper and the one Go ZooKeeper client in wide use:
// pure Go, sessions that survive reconnects, watches set again after a
// reconnect, container nodes (ZooKeeper 3.5.3 and later). Its calls take no
// context (the fork that added contexts, z-division/go-zookeeper, has not been
// released since 2019); the Driver runs each call in a goroutine and returns
// when the context ends, and the call itself ends when the server answers, the
// session's connection drops or the Driver is closed. The Driver remembers
// every unanswered call that changes an owner's nodes, and orders that owner's
// next calls after it.
package zklock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/go-zookeeper/zk"
)

// Client is the dlock.Client zklock.New returns: a dlock.Locker on ZooKeeper,
// over a Driver, and a dlock.Inspector through it. It is safe for concurrent
// use.
type Client = dlock.Client

// New returns a Client that locks through d, with opts as the defaults of every
// TryLock and Lock. Every TTL must lie within d's TTLLimits: dlock.DefaultTTL
// fits the default session timeout. It returns an error matching
// dlock.ErrInvalid for a nil driver or a bad option; it does no I/O.
func New(d *Driver, opts ...dlock.Option) (*dlock.Client, error) {
	if d == nil {
		return nil, fmt.Errorf("%w: nil driver", dlock.ErrInvalid)
	}
	return dlock.NewClient(d, opts...)
}

// Defaults.
const (
	// DefaultRoot is the znode under which locks live unless WithRoot is given.
	DefaultRoot = "/dlock"

	// DefaultSessionTimeout is the session timeout asked for unless
	// WithSessionTimeout is given. It fits dlock.DefaultTTL.
	DefaultSessionTimeout = dlock.DefaultTTL

	// DefaultRequestTimeout bounds each call of a Driver unless
	// WithRequestTimeout is given.
	DefaultRequestTimeout = 5 * time.Second
)

// Driver is a dlock.Driver on one ZooKeeper session: also a dlock.Notifier,
// dlock.Abandoner, dlock.TTLLimiter and dlock.Inspector. It is safe for
// concurrent use. NewDriver makes the session; Close ends it, which deletes
// every node it holds: close a Driver once no Client uses it any more.
type Driver struct {
	conn *zk.Conn
	root string
	acl  []zk.ACL

	timeoutMs atomic.Int64  // negotiated session timeout
	session   chan struct{} // pokes: the session is connected (again)

	sweep sweeper

	// inflight holds, per lock node and owner, the requests that change the
	// owner's nodes and are not answered yet, also those whose caller gave up:
	// a later call for the same owner waits for them, so that it cannot miss a
	// node a create makes late, and a late delete cannot remove a newer node.
	inflightMu sync.Mutex
	inflight   map[ownerKey]*opSet

	reqTimeout time.Duration // bounds each call of the Driver
	sess       sessionWatch  // ends the Grant.Lost of the current session's holdings

	testHookCreate func() // called before each create of a lock node, in tests
	onTimeout      func() // called when the negotiated session timeout is known

	closeOnce sync.Once
	stop      chan struct{}
	wg        sync.WaitGroup
}

// Option configures NewDriver.
type Option func(*options)

type options struct {
	root    string
	timeout time.Duration
	request time.Duration
	acl     []zk.ACL
	auth    []authInfo
	logf    func(format string, args ...any)
	dialer  zk.Dialer
}

type authInfo struct {
	scheme string
	auth   []byte
}

// WithRoot sets the znode under which locks live: an absolute path with no
// trailing '/'. Missing nodes on the way are created as container nodes. The
// default is DefaultRoot ("/dlock").
func WithRoot(path string) Option { return func(o *options) { o.root = path } }

// WithSessionTimeout sets the session timeout asked of the server; the server
// clamps it into its own bounds, and SessionTimeout reports the result. It is
// the longest TTL a lock can have, and how long a crashed holder blocks its
// locks. The default is DefaultSessionTimeout (15s).
func WithSessionTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithRequestTimeout bounds each call of the Driver: one acquisition attempt
// (TryLock is one), one extend, release, TTL or abandon, each of which takes a
// few round trips. A call the server has not answered by then (it is down,
// hung or cut off) fails with an error matching dlock.ErrUnavailable, whatever
// the caller's context allows; the caller's context still ends it sooner.
// Without it, a call would wait until the client gives the connection up (two
// thirds of the session timeout). A TryLock that meets such a server returns
// after the timeout plus its clean-up (at most 2s more). The default is
// DefaultRequestTimeout (5s).
func WithRequestTimeout(d time.Duration) Option { return func(o *options) { o.request = d } }

// WithACL sets the ACL of the nodes the Driver creates. The default is
// zk.WorldACL(zk.PermAll).
func WithACL(acl ...zk.ACL) Option { return func(o *options) { o.acl = acl } }

// WithAuth adds authentication to the session (zk.Conn.AddAuth), for example
// scheme "digest" and auth "user:password". It is sent again after reconnects.
func WithAuth(scheme string, auth []byte) Option {
	return func(o *options) { o.auth = append(o.auth, authInfo{scheme, auth}) }
}

// WithLogger receives the ZooKeeper client's log lines. The default drops them.
func WithLogger(logf func(format string, args ...any)) Option {
	return func(o *options) { o.logf = logf }
}

// WithDialer sets how connections to the servers are made. The default is
// net.DialTimeout.
func WithDialer(d func(network, address string, timeout time.Duration) (net.Conn, error)) Option {
	return func(o *options) { o.dialer = d }
}

// NewDriver connects to the ZooKeeper servers (host:port) and waits until the
// session is established or ctx ends. The error matches dlock.ErrInvalid for bad
// options and dlock.ErrUnavailable when no session could be made.
func NewDriver(ctx context.Context, servers []string, opts ...Option) (*Driver, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", dlock.ErrInvalid)
	}
	o := options{root: DefaultRoot, timeout: DefaultSessionTimeout, request: DefaultRequestTimeout, acl: zk.WorldACL(zk.PermAll)}
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: nil option", dlock.ErrInvalid)
		}
		opt(&o)
	}
	if len(servers) == 0 {
		return nil, fmt.Errorf("%w: no ZooKeeper servers", dlock.ErrInvalid)
	}
	for _, s := range servers {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return nil, fmt.Errorf("%w: server %q: %v", dlock.ErrInvalid, s, err)
		}
	}
	if err := checkRoot(o.root); err != nil {
		return nil, err
	}
	if o.timeout < time.Millisecond || o.timeout > time.Duration(1<<31-1)*time.Millisecond {
		return nil, fmt.Errorf("%w: session timeout %v", dlock.ErrInvalid, o.timeout)
	}
	if len(o.acl) == 0 {
		return nil, fmt.Errorf("%w: empty ACL", dlock.ErrInvalid)
	}
	if o.request <= 0 {
		return nil, fmt.Errorf("%w: request timeout %v must be positive", dlock.ErrInvalid, o.request)
	}
	d := &Driver{root: o.root, acl: o.acl, session: make(chan struct{}, 1), stop: make(chan struct{}),
		inflight: map[ownerKey]*opSet{}, reqTimeout: o.request}
	d.sweep.init()
	d.timeoutMs.Store(o.timeout.Milliseconds())
	// The client logs the session timeout the server granted right after it
	// reports the session established; the session is ready for the Driver once
	// that line is in.
	established := make(chan struct{})
	var once sync.Once
	d.onTimeout = func() { once.Do(func() { close(established) }) }
	onEvent := zk.WithEventCallback(func(ev zk.Event) {
		if ev.Type == zk.EventSession && ev.State == zk.StateHasSession {
			select {
			case d.session <- struct{}{}:
			default:
			}
		}
		if ev.Type == zk.EventSession && ev.State == zk.StateExpired {
			d.sess.end(errSessionExpired)
		}
	})
	log := zk.WithLogger(logger{d: d, logf: o.logf})
	var conn *zk.Conn
	var err error
	if o.dialer != nil {
		conn, _, err = zk.Connect(servers, o.timeout, onEvent, log, zk.WithDialer(o.dialer))
	} else {
		conn, _, err = zk.Connect(servers, o.timeout, onEvent, log)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", dlock.ErrUnavailable, err)
	}
	d.conn = conn
	select {
	case <-established:
	case <-ctx.Done():
		conn.Close()
		return nil, errors.Join(dlock.ErrUnavailable, fmt.Errorf("zklock: no session with %v (or github.com/go-zookeeper/zk did not log the session timeout it negotiated, as v1.0.4 does)", servers), ctx.Err())
	}
	for _, a := range o.auth {
		if err := d.call(ctx, func() error { return conn.AddAuth(a.scheme, a.auth) }); err != nil {
			conn.Close()
			return nil, mapErr(err)
		}
	}
	d.wg.Add(1)
	go d.sweepLoop()
	return d, nil
}

// checkRoot checks a root path: absolute, no trailing '/', components ZooKeeper
// accepts.
func checkRoot(root string) error {
	if root == "" || root[0] != '/' || (len(root) > 1 && strings.HasSuffix(root, "/")) {
		return fmt.Errorf("%w: root %q must be an absolute znode path without a trailing '/'", dlock.ErrInvalid, root)
	}
	if root == "/" {
		return nil
	}
	for _, c := range strings.Split(root[1:], "/") {
		if c == "" || c == "." || c == ".." || escape(c) != c {
			return fmt.Errorf("%w: root %q: bad component %q", dlock.ErrInvalid, root, c)
		}
	}
	return nil
}

// logger passes the ZooKeeper client's log lines on, and reads the session
// timeout the server granted from its "authenticated" line, logged after each
// session establishment: the client keeps the timeout in an unexported field.
// (Between a reconnect and that line the previous value stands; it differs only
// when the servers of one ensemble are configured with different bounds.)
type logger struct {
	d    *Driver
	logf func(format string, args ...any)
}

func (l logger) Printf(format string, args ...any) {
	if format == "authenticated: id=%d, timeout=%d" && len(args) == 2 {
		if ms, ok := args[1].(int32); ok && ms > 0 {
			l.d.timeoutMs.Store(int64(ms))
			l.d.onTimeout()
		}
	}
	if l.logf != nil {
		l.logf(format, args...)
	}
}

// SessionTimeout returns the session timeout the server granted: the longest TTL
// a lock can have, and how long the locks of a holder that stops answering stay
// taken.
func (d *Driver) SessionTimeout() time.Duration {
	return time.Duration(d.timeoutMs.Load()) * time.Millisecond
}

// SessionID returns the current session's id (0 while there is none).
func (d *Driver) SessionID() int64 { return d.conn.SessionID() }

// Close ends the session, which deletes every lock node it holds or waits with,
// and stops the Driver. Leases still running lose their locks. It is safe to call
// more than once.
func (d *Driver) Close() error {
	d.closeOnce.Do(func() {
		close(d.stop)
		d.conn.Close()
		d.wg.Wait()
		d.sess.end(errDriverClosed)
	})
	return nil
}

// call runs f, a blocking ZooKeeper call, and returns its error, or ctx's error
// when ctx ends first (f then finishes on its own: the client answers every
// request, at the latest with an error when the connection drops or closes).
func (d *Driver) call(ctx context.Context, f func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// mapErr turns a ZooKeeper client error into one that matches a dlock sentinel.
// Context errors pass through.
func mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, zk.ErrNoAuth), errors.Is(err, zk.ErrAuthFailed), errors.Is(err, zk.ErrInvalidACL):
		return fmt.Errorf("%w: %w", dlock.ErrRefused, err)
	case errors.Is(err, zk.ErrNoChildrenForEphemerals):
		return fmt.Errorf("%w: %w", dlock.ErrConflict, err)
	}
	return fmt.Errorf("%w: %w", dlock.ErrUnavailable, err)
}
