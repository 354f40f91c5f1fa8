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

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/go-zookeeper/zk"
)

// Client is the dlock.Client zklock.NewClient returns: a dlock.Locker on
// ZooKeeper, over a Driver, and a driver.Inspector through it. It is safe for
// concurrent use.
type Client = dlock.Client

// NewClient returns a Client that locks through d, with opts as the defaults of
// every TryLock and Lock. Every TTL must lie within d's TTLLimits:
// dlock.DefaultTTL fits the default session timeout. It returns an error
// matching dlock.ErrInvalid for a nil driver or a bad option; it does no I/O.
//
// There is no New(servers) shortcut, as other backends have over their
// connection: the Driver is the ZooKeeper session, which the caller closes
// (Driver.Close) once no Client uses it, and a Client does not close its
// driver.
func NewClient(d *Driver, opts ...dlock.Option) (*dlock.Client, error) {
	if d == nil {
		return nil, fmt.Errorf("%w: nil driver", driver.ErrInvalid)
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

// Driver is a driver.Driver on one ZooKeeper session: also a driver.Notifier,
// driver.Abandoner, driver.TTLLimiter and driver.Inspector. It is safe for
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

	// waiters holds, per lock node and owner, the node of a waiting
	// acquisition, from its first attempt until it is granted or abandoned.
	waitersMu sync.Mutex
	waiters   map[ownerKey]*waiter

	plainCreate atomic.Bool // the session may not write the clock node: create without the multi
	wire        wire        // tells when a request has been written to the server

	reqTimeout time.Duration // bounds each call of the Driver
	sess       sessionWatch  // ends the Grant.Lost of the current session's holdings
	holds      holdings      // the holdings watched for their node's deletion (loss.go)

	testHookCreate func()          // called before each create of a lock node, in tests
	testHookGrant  func(lp string) // called before a grant's holding is registered, in tests
	onTimeout      func()          // called when the negotiated session timeout is known

	closeOnce sync.Once
	stop      chan struct{}
	wg        sync.WaitGroup
}

// NewDriver connects to the ZooKeeper servers (host:port) and waits until the
// session is established or ctx ends. The error matches dlock.ErrInvalid for bad
// options and dlock.ErrUnavailable when no session could be made.
func NewDriver(ctx context.Context, servers []string, opts ...Option) (*Driver, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", driver.ErrInvalid)
	}
	o := options{root: DefaultRoot, timeout: DefaultSessionTimeout, request: DefaultRequestTimeout, acl: zk.WorldACL(zk.PermAll)}
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: nil option", driver.ErrInvalid)
		}
		opt(&o)
	}
	if len(servers) == 0 {
		return nil, fmt.Errorf("%w: no ZooKeeper servers", driver.ErrInvalid)
	}
	for _, s := range servers {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return nil, fmt.Errorf("%w: server %q: %v", driver.ErrInvalid, s, err)
		}
	}
	if err := checkRoot(o.root); err != nil {
		return nil, err
	}
	if o.timeout < time.Millisecond || o.timeout > time.Duration(1<<31-1)*time.Millisecond {
		return nil, fmt.Errorf("%w: session timeout %v", driver.ErrInvalid, o.timeout)
	}
	if len(o.acl) == 0 {
		return nil, fmt.Errorf("%w: empty ACL", driver.ErrInvalid)
	}
	if o.request <= 0 {
		return nil, fmt.Errorf("%w: request timeout %v must be positive", driver.ErrInvalid, o.request)
	}
	d := &Driver{root: o.root, acl: o.acl, session: make(chan struct{}, 1), stop: make(chan struct{}),
		inflight: map[ownerKey]*opSet{}, waiters: map[ownerKey]*waiter{}, reqTimeout: o.request}
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
		d.lossEvent(ev)
	})
	log := zk.WithLogger(logger{d: d, logf: o.logf})
	var conn *zk.Conn
	var err error
	dial := o.dialer
	if dial == nil {
		dial = net.DialTimeout
	}
	conn, _, err = zk.Connect(servers, o.timeout, onEvent, log, zk.WithDialer(d.wire.dialer(dial)))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
	}
	d.conn = conn
	select {
	case <-established:
	case <-ctx.Done():
		conn.Close()
		return nil, errors.Join(driver.ErrUnavailable, fmt.Errorf("zklock: no session with %v (or github.com/go-zookeeper/zk did not log the session timeout it negotiated, as v1.0.4 does)", servers), ctx.Err())
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
		return fmt.Errorf("%w: root %q must be an absolute znode path without a trailing '/'", driver.ErrInvalid, root)
	}
	if root == "/" {
		return nil
	}
	for _, c := range strings.Split(root[1:], "/") {
		if c == "" || c == "." || c == ".." || escape(c) != c {
			return fmt.Errorf("%w: root %q: bad component %q", driver.ErrInvalid, root, c)
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

var (
	_ driver.Driver     = (*Driver)(nil)
	_ driver.Notifier   = (*Driver)(nil)
	_ driver.Abandoner  = (*Driver)(nil)
	_ driver.TTLLimiter = (*Driver)(nil)
	_ driver.Inspector  = (*Driver)(nil)
)

// Acquire implements driver.Driver: one attempt to take r.Key for r.Owner. A
// TryLock attempt (r.Waiting false) never queues: on a held lock it creates
// nothing, and a node it made that turns out not to be first is deleted again.
// A waiting attempt queues a node, or finds the one an earlier attempt of the
// same owner made (also one whose create reply was lost), and returns a
// *driver.Taken (Queued, with the node as its Handle) while it is not first.
// The token is the node's czxid.
//
// The grant's Lost ends when the session expires (its nodes are gone then): the
// Lease is lost at once, not at its next renewal or its deadline.
func (d *Driver) Acquire(ctx context.Context, r driver.AcquireRequest) (driver.Grant, error) {
	ctx, done := d.request(ctx)
	g, err := d.acquireDelayed(ctx, r.Key, r.Owner, r.TTL, r.Metadata, r.Waiting, r.Delay)
	if err = done(err); err != nil {
		return driver.Grant{}, err
	}
	if d.testHookGrant != nil {
		d.testHookGrant(d.lockPath(r.Key))
	}
	return driver.Grant{Token: g.token, TTL: g.ttl, Handle: &handle{node: g.node, metadata: g.meta, token: g.token, delayed: g.delayed},
		Lost: d.hold(d.lockPath(r.Key), g.node, d.sess.lost(g.session, d.conn.SessionID()), g.watch)}, nil
}

// Info implements driver.Driver: ZooKeeper's locks are granted in the order
// their nodes were created (driver.KindFair).
func (d *Driver) Info() driver.DriverInfo {
	return driver.DriverInfo{Backend: "zklock", Kind: driver.KindFair}
}

// Extend implements driver.Driver: it rewrites the holder's node with ttl, which
// must not exceed the session timeout. It fails with dlock.ErrNotHeld when the
// node is gone (released, forced, or deleted with its expired session).
func (d *Driver) Extend(ctx context.Context, h driver.Holding, ttl time.Duration) (time.Duration, error) {
	ctx, done := d.request(ctx)
	granted, err := d.extend(ctx, h, ttl)
	return granted, done(err)
}

// Release implements driver.Driver: it deletes the holder's node, and touches no
// other owner's. It returns dlock.ErrNotHeld when the node is gone.
func (d *Driver) Release(ctx context.Context, h driver.Holding) error {
	ctx, done := d.request(ctx)
	return done(d.release(ctx, h))
}

// TTL implements driver.Driver: the time left of the holder's TTL, counted from
// the last write of its node.
func (d *Driver) TTL(ctx context.Context, h driver.Holding) (time.Duration, error) {
	ctx, done := d.request(ctx)
	left, err := d.ttlLeft(ctx, h)
	return left, done(err)
}

// Abandon implements driver.Abandoner: it deletes every node of h.Owner under
// the lock, held or queued, after the owner's requests still in flight have
// been answered (so that a create answered late is deleted too); when the
// server cannot be reached in time, the Driver deletes them once it can. It is
// not an error when there is none.
func (d *Driver) Abandon(ctx context.Context, h driver.Holding) error {
	ctx, done := d.request(ctx)
	_, err := d.remove(ctx, h.Key, h.Owner)
	return done(err)
}

// Subscribe implements driver.Notifier. It waits on the watch the waiter's
// attempts set on the node just before its own in the queue (not on the whole
// queue), and sends on the returned channel when that node is deleted, or when
// the waiter should try again because the watch or the session is gone.
func (d *Driver) Subscribe(ctx context.Context, h driver.Holding) (<-chan struct{}, func(), error) {
	if err := d.checkArgs(h.Key, h.Owner); err != nil {
		return nil, nil, err
	}
	w := d.waiterOf(ownerKey{d.lockPath(h.Key), h.Owner})
	if hd, ok := h.Handle.(*handle); ok && hd != nil && hd.w != nil {
		w = hd.w
	}
	if w == nil {
		return nil, nil, fmt.Errorf("%w: zklock: %q has no queued node of this owner to watch for", driver.ErrNotHeld, h.Key)
	}
	return d.subscribe(ctx, w)
}
