package zklock

import (
	"net"
	"time"

	"github.com/go-zookeeper/zk"
)

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
