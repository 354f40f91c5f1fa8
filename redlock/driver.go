package redlock

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// Default per-node timeouts: a fifth of the TTL, within these bounds, and never
// more than three quarters of a short TTL (a grant that comes back after the
// lease's validity is refused anyway).
const (
	MinNodeTimeout = 100 * time.Millisecond
	MaxNodeTimeout = time.Second
)

// inspectTimeout bounds each server's reply to Inspect, List and ForceUnlock when
// no WithNodeTimeout is given.
const inspectTimeout = 2 * time.Second

// Driver is the driver.Driver of Redlock: each call goes to every node in parallel
// and succeeds with a majority. It is also a driver.Notifier, a driver.Abandoner and
// a driver.Inspector. Most users want New instead.
type Driver struct {
	nodes   []*redislock.Driver
	rdbs    []redis.UniversalClient
	quorum  int
	timeout time.Duration // per node; 0: from the TTL
	ident   identities    // what each node's server said it is
	every   []int         // the indexes of every node
}

var (
	_ driver.Driver    = (*Driver)(nil)
	_ driver.Notifier  = (*Driver)(nil)
	_ driver.Abandoner = (*Driver)(nil)
	_ driver.Inspector = (*Driver)(nil)
)

// Option configures a Driver (NewDriver).
type Option func(*options)

// options is what the Options of a Driver set.
type options struct {
	timeout    time.Duration // per node; 0: from the TTL
	timeoutSet bool
}

// WithNodeTimeout bounds each node's reply to an acquisition attempt. A node
// that has not answered by then counts as failed for that attempt, and the
// attempt does not wait for it. (Extend, release and TTL, which return as soon
// as a majority has answered, give each node up to MaxNodeTimeout, or the TTL
// when shorter, and never less than this.) It must be positive, and well below the TTLs used: every
// millisecond an acquisition waits comes off the lease's validity. It costs
// time only when the outcome needs the slow nodes: an acquisition or an extend
// returns as soon as a majority has granted it. The default is a fifth of the
// request's TTL, at least MinNodeTimeout (100ms) and at most MaxNodeTimeout (1s),
// and never more than three quarters of the TTL.
func WithNodeTimeout(d time.Duration) Option {
	return func(o *options) { o.timeout, o.timeoutSet = d, true }
}

// NewDriver returns the Redlock driver over nodes, independent Redis masters
// (each a *redis.Client, or a Sentinel failover client for one master). Their
// number must be odd and at least 3. It returns an error matching
// dlock.ErrInvalid, naming the node, for a nil client, a *redis.ClusterClient or
// *redis.Ring (not one master), the same client or address given twice, and a
// bad option. It does no I/O: one server listed under two names (127.0.0.1:P
// and localhost:P, an IP and a host name) is found at the first acquisition,
// which first asks every node's server what it is (INFO server: its run_id; one
// more round trip, once) and compares the answers; that acquisition, and every
// later one, fails with an error matching dlock.ErrInvalid naming both nodes,
// and takes nothing. A node that does not answer then is asked before its
// first request of a later acquisition. A node whose server will not say (an
// ACL user without INFO) is not compared.
func NewDriver(nodes []redis.UniversalClient, opts ...Option) (*Driver, error) {
	switch n := len(nodes); {
	case n == 0:
		return nil, fmt.Errorf("%w: redlock: no nodes", driver.ErrInvalid)
	case n == 1:
		return nil, fmt.Errorf("%w: redlock: one node is not Redlock (use redislock for a single server)", driver.ErrInvalid)
	case n%2 == 0:
		return nil, fmt.Errorf("%w: redlock: %d nodes: use an odd number (%d nodes tolerate no more failures than %d)", driver.ErrInvalid, n, n, n-1)
	}
	d := &Driver{quorum: len(nodes)/2 + 1, ident: identities{ids: make([]string, len(nodes))}}
	seen := map[string]int{}
	for i, rdb := range nodes {
		if driver.IsNil(rdb) {
			return nil, fmt.Errorf("%w: redlock: node %d is nil", driver.ErrInvalid, i)
		}
		switch rdb.(type) {
		case *redis.ClusterClient:
			return nil, fmt.Errorf("%w: redlock: node %d is a Redis Cluster client; Redlock needs independent masters, and a Cluster is not one (use redislock on the Cluster instead)", driver.ErrInvalid, i)
		case *redis.Ring:
			return nil, fmt.Errorf("%w: redlock: node %d is a redis.Ring; Redlock needs one client per independent master", driver.ErrInvalid, i)
		}
		for j, other := range nodes[:i] {
			if other == rdb {
				return nil, fmt.Errorf("%w: redlock: nodes %d and %d are the same client", driver.ErrInvalid, j, i)
			}
		}
		if c, ok := rdb.(*redis.Client); ok {
			if o := c.Options(); o.Addr != "FailoverClient" { // a Sentinel client has no fixed address
				id := o.Network + " " + o.Addr
				if j, dup := seen[id]; dup {
					return nil, fmt.Errorf("%w: redlock: nodes %d and %d are the same server %s", driver.ErrInvalid, j, i, o.Addr)
				}
				seen[id] = i
			}
		}
		nd, err := redislock.NewDriver(rdb)
		if err != nil {
			return nil, err
		}
		d.nodes, d.rdbs, d.every = append(d.nodes, nd), append(d.rdbs, rdb), append(d.every, i)
	}
	var o options
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: redlock: nil option", driver.ErrInvalid)
		}
		opt(&o)
	}
	if o.timeoutSet && o.timeout <= 0 {
		return nil, fmt.Errorf("%w: redlock: node timeout %v must be positive", driver.ErrInvalid, o.timeout)
	}
	d.timeout = o.timeout
	return d, nil
}

// Nodes returns the number of nodes; Quorum the number that must agree.
func (d *Driver) Nodes() int { return len(d.nodes) }

// Quorum returns the number of nodes that must grant an acquisition or an extend.
func (d *Driver) Quorum() int { return d.quorum }

// nodeTimeout is the per-node bound of a request about a holding with the given TTL.
func (d *Driver) nodeTimeout(ttl time.Duration) time.Duration {
	if d.timeout > 0 {
		return d.timeout
	}
	if ttl <= 0 {
		return inspectTimeout
	}
	return min(max(ttl/5, MinNodeTimeout), MaxNodeTimeout, ttl*3/4)
}

// settleTimeout bounds each node's reply to the requests about a holding
// (extend, release, TTL, abandon): they return as soon as a majority has
// answered, so a slow node costs them nothing, and a node given more time
// (MaxNodeTimeout, or the TTL when shorter; never less than the node timeout)
// keeps a loaded server from failing them.
func (d *Driver) settleTimeout(ttl time.Duration) time.Duration {
	t := d.nodeTimeout(ttl)
	if ttl <= 0 {
		return t
	}
	return max(t, min(ttl, MaxNodeTimeout))
}

// all returns the indexes of every node (shared: not to be changed).
func (d *Driver) all() []int {
	return d.every
}

// Extend implements driver.Driver: the holding is extended on every node that
// still holds it, and the extend succeeds when a majority did. It fails with
// dlock.ErrNotHeld when so many nodes no longer hold it that no majority can.
func (d *Driver) Extend(ctx context.Context, h driver.Holding, ttl time.Duration) (time.Duration, error) {
	nh := h
	nh.Handle = nil
	// The extends still on their way when a majority has answered go on: a
	// holding extended on every node survives the loss of more of them.
	got, err := askNodesDetached(ctx, context.WithoutCancel(ctx), d.all(), d.settleTimeout(ttl), func(ctx context.Context, i int) (time.Duration, error) {
		return d.nodes[i].Extend(ctx, nh, ttl)
	}, func(got []reply[time.Duration], pending int) bool {
		return d.quorumDecided(count(got), pending)
	})
	if err != nil {
		return 0, err
	}
	if count(got) >= d.quorum {
		return ttl, nil
	}
	return 0, d.noQuorum("extended", got)
}

// Release implements driver.Driver: the holding is released on every node, after
// the acquisition's attempts still on their way have answered; it is abandoned
// (see redislock's Driver.Abandon) on the nodes where an attempt may still
// land. It succeeds when a majority released it, and fails with
// dlock.ErrNotHeld when a majority did not hold it any more.
func (d *Driver) Release(ctx context.Context, h driver.Holding) error {
	nh := h
	nh.Handle = nil
	// The releases still on their way when a majority has answered must not
	// be cut short by a caller that cancels its context on return: they run
	// detached, each bounded by the node timeout.
	ctx = context.WithoutCancel(ctx)
	hd, _ := h.Handle.(*holding)
	unknown := hd.unknown()
	patience := time.Now().Add(d.nodeTimeout(h.TTL))
	rh := nh
	if hd != nil {
		rh.Handle = hd.token // the token handed out, kept by each node's released record
	}
	got, late, err := askNodesWithStragglers(ctx, ctx, d.all(), d.settleTimeout(h.TTL), func(ctx context.Context, i int) (time.Duration, error) {
		if unknown[i] {
			return 0, d.nodes[i].Abandon(ctx, nh)
		}
		return 0, d.nodes[i].Release(ctx, rh)
	}, func(got []reply[time.Duration], _ int) bool {
		return count(got) >= d.quorum
	})
	if err != nil {
		return err
	}
	// A process may exit as soon as Unlock returns, and its releases still on
	// their way with it: wait for the other nodes too, up to the node timeout,
	// so that a node that answers in time is not left holding the lock until
	// its TTL (two such nodes and one failure would keep the lock from
	// everyone). A node slower than that gets its release all the same while
	// the process lives.
	late.waitUntil(patience)
	if count(got) >= d.quorum {
		return nil
	}
	return d.noQuorum("released", got)
}

// TTL implements driver.Driver: the time until fewer than a majority of the nodes
// hold the lock, as the nodes see it.
func (d *Driver) TTL(ctx context.Context, h driver.Holding) (time.Duration, error) {
	nh := h
	nh.Handle = nil
	got, err := askNodes(ctx, d.all(), d.settleTimeout(h.TTL), func(ctx context.Context, i int) (time.Duration, error) {
		return d.nodes[i].TTL(ctx, nh)
	}, nil)
	if err != nil {
		return 0, err
	}
	var ttls []time.Duration
	for _, r := range got {
		if r.err == nil {
			ttls = append(ttls, r.val)
		}
	}
	if len(ttls) < d.quorum {
		return 0, d.noQuorum("held", got)
	}
	slices.Sort(ttls)
	return ttls[len(ttls)-d.quorum], nil
}

// Abandon implements driver.Abandoner: redislock's abandon (release, and a mark
// that stops a late attempt) on every node.
func (d *Driver) Abandon(ctx context.Context, h driver.Holding) error {
	nh := h
	nh.Handle = nil
	if w, ok := h.Handle.(*waits); ok {
		w.end()
	}
	// The abandons run detached, each bounded as an extend is; the caller waits
	// for them no longer than an acquisition waits for its nodes.
	cctx, cancel := context.WithTimeout(ctx, d.nodeTimeout(h.TTL))
	defer cancel()
	got, err := askNodesDetached(cctx, context.WithoutCancel(ctx), d.all(), d.settleTimeout(h.TTL), func(ctx context.Context, i int) (struct{}, error) {
		return struct{}{}, d.nodes[i].Abandon(ctx, nh)
	}, nil)
	if err != nil {
		return err
	}
	if errs := nodeErrors(got, nil); errs != nil {
		return fmt.Errorf("%w: redlock: abandon: %w", driver.ErrUnavailable, errs)
	}
	return nil
}
