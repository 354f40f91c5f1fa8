// Package redlock is dlock's Redlock backend: exclusive leases with fencing tokens
// over N independent Redis masters (N odd, 5 typical), held while a majority of
// them hold the lock, so that the lock keeps working while a minority of the
// servers is down, slow or cut off.
//
// Each server stores the lock exactly as the redislock package does (the same keys
// and Lua scripts), and every operation goes to all servers in parallel, each
// bounded by a per-node timeout well below the TTL (WithNodeTimeout):
//
//   - An acquisition succeeds only when a majority grants it. Its validity runs
//     from the start of the attempt: TTL minus the round trip minus the drift
//     margin (the Lease's local deadline), so a slow majority eats into it, and a
//     grant that arrives after its validity is refused. When no majority grants,
//     the servers that did, and those that did not answer, are released at once.
//   - Fencing tokens strictly increase per key although no server holds the
//     truth: each server draws a token, the attempt takes the largest of the
//     majority's and records it on the majority (one more parallel round trip)
//     before handing it out. Any two majorities share a server, and that server's
//     counter is above the earlier token, so every later acquisition draws a
//     greater one.
//   - Extend must reach a majority, and never re-creates a lock on any server;
//     when a majority says the lock is gone, the lease is lost.
//   - Waiters subscribe on every server and wake on the first release message;
//     they never sleep past the holder's remaining time.
//
// # What Redlock guarantees, and what it does not
//
// Exclusion holds while the clocks of clients and servers run at nearly the same
// rate (within the drift margin, dlock.WithDriftFactor), while a majority of the
// servers stays up, and while no server forgets a lock it granted. A server that
// restarts without persistence forgets: if it was part of the holder's majority,
// another client can gather a new majority at once, and two clients hold the
// lock (the fencing token of the new holder is still greater, so a resource that
// checks tokens rejects the old holder's writes). Keep a restarted server out of
// service for longer than the longest TTL (delayed restart), or run it with
// appendfsync always. A Redis Cluster or Ring client given as a node is refused:
// it is not one independent master. Likewise the same server must not be listed
// twice, and the nodes must not replicate one another.
//
// Give every node client ContextTimeoutEnabled, so that the per-node timeout also
// ends the network read; otherwise a silent server holds a goroutine until the
// client's ReadTimeout (the attempt itself returns on time either way).
package redlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redisscript"
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

var fenceRetentionMS = strconv.FormatInt(redislock.FenceRetention.Milliseconds(), 10)

// Driver is the dlock.Driver of Redlock: each call goes to every node in parallel
// and succeeds with a majority. It is also a dlock.Notifier, a dlock.Abandoner and
// a dlock.Inspector. Most users want New instead.
type Driver struct {
	nodes   []*redislock.Driver
	rdbs    []redis.UniversalClient
	quorum  int
	timeout time.Duration // per node; 0: from the TTL
	ident   identities    // what each node's server said it is
}

var (
	_ dlock.Driver    = (*Driver)(nil)
	_ dlock.Notifier  = (*Driver)(nil)
	_ dlock.Abandoner = (*Driver)(nil)
	_ dlock.Inspector = (*Driver)(nil)
)

// Option configures a Driver.
type Option func(*Driver) error

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
	return func(dr *Driver) error {
		if d <= 0 {
			return fmt.Errorf("%w: redlock: node timeout %v must be positive", dlock.ErrInvalid, d)
		}
		dr.timeout = d
		return nil
	}
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
		return nil, fmt.Errorf("%w: redlock: no nodes", dlock.ErrInvalid)
	case n == 1:
		return nil, fmt.Errorf("%w: redlock: one node is not Redlock (use redislock for a single server)", dlock.ErrInvalid)
	case n%2 == 0:
		return nil, fmt.Errorf("%w: redlock: %d nodes: use an odd number (%d nodes tolerate no more failures than %d)", dlock.ErrInvalid, n, n, n-1)
	}
	d := &Driver{quorum: len(nodes)/2 + 1, ident: identities{ids: make([]string, len(nodes))}}
	seen := map[string]int{}
	for i, rdb := range nodes {
		if dlock.IsNil(rdb) {
			return nil, fmt.Errorf("%w: redlock: node %d is nil", dlock.ErrInvalid, i)
		}
		switch rdb.(type) {
		case *redis.ClusterClient:
			return nil, fmt.Errorf("%w: redlock: node %d is a Redis Cluster client; Redlock needs independent masters, and a Cluster is not one (use redislock on the Cluster instead)", dlock.ErrInvalid, i)
		case *redis.Ring:
			return nil, fmt.Errorf("%w: redlock: node %d is a redis.Ring; Redlock needs one client per independent master", dlock.ErrInvalid, i)
		}
		for j, other := range nodes[:i] {
			if other == rdb {
				return nil, fmt.Errorf("%w: redlock: nodes %d and %d are the same client", dlock.ErrInvalid, j, i)
			}
		}
		if c, ok := rdb.(*redis.Client); ok {
			if o := c.Options(); o.Addr != "FailoverClient" { // a Sentinel client has no fixed address
				id := o.Network + " " + o.Addr
				if j, dup := seen[id]; dup {
					return nil, fmt.Errorf("%w: redlock: nodes %d and %d are the same server %s", dlock.ErrInvalid, j, i, o.Addr)
				}
				seen[id] = i
			}
		}
		nd, err := redislock.NewDriver(rdb)
		if err != nil {
			return nil, err
		}
		d.nodes, d.rdbs = append(d.nodes, nd), append(d.rdbs, rdb)
	}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: redlock: nil option", dlock.ErrInvalid)
		}
		if err := o(d); err != nil {
			return nil, err
		}
	}
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

// reply is one node's answer to a request sent to several nodes.
type reply[T any] struct {
	node int
	val  T
	err  error
}

// errNoAnswer is the error of a node that did not answer within its timeout.
func errNoAnswer(timeout time.Duration) error { return &noAnswer{timeout} }

// noAnswer is a node that did not answer within its timeout: its request may
// still land. It matches dlock.ErrUnavailable.
type noAnswer struct{ timeout time.Duration }

func (e *noAnswer) Error() string {
	return fmt.Sprintf("%v: no answer within %v", dlock.ErrUnavailable, e.timeout)
}

// Is makes a noAnswer match dlock.ErrUnavailable.
func (e *noAnswer) Is(target error) bool { return target == dlock.ErrUnavailable }

// silent reports whether err is a node that did not answer in time.
func silent(err error) bool {
	var na *noAnswer
	return errors.As(err, &na)
}

// fan calls f on the given nodes in parallel, each under ctx bounded by timeout,
// and collects their replies until decided reports that the replies so far settle
// the outcome, every node has answered, or the timeout has passed. The replies
// are in node order; a node that did not answer in time has errNoAnswer (its
// call may still land). It returns ctx's error when ctx ended first. The calls
// not collected finish on their own: the channel has room for every reply.
func fan[T any](ctx context.Context, nodes []int, timeout time.Duration,
	f func(ctx context.Context, node int) (T, error), decided func(got []reply[T], pending int) bool) ([]reply[T], error) {
	return fanFrom(ctx, ctx, nodes, timeout, f, decided)
}

// fanFrom is fan with the calls made under base (bounded by timeout) and the
// collection under ctx: with a base detached from ctx, the calls still on their
// way when the outcome is settled are not cut short by the caller cancelling
// ctx on return.
func fanFrom[T any](ctx, base context.Context, nodes []int, timeout time.Duration,
	f func(ctx context.Context, node int) (T, error), decided func(got []reply[T], pending int) bool) ([]reply[T], error) {
	got, _, err := fanLate(ctx, base, nodes, timeout, f, decided)
	return got, err
}

// stragglers are the calls of a fan still on their way when decided settled it.
type stragglers[T any] struct {
	ch      <-chan reply[T]
	pending []int
	until   time.Time // their node timeout
}

// wait collects the stragglers' replies until every one has answered or their
// timeout has passed, and returns the nodes that did not answer.
func (s *stragglers[T]) wait() (unanswered []int) {
	if s == nil || len(s.pending) == 0 {
		return nil
	}
	left := map[int]bool{}
	for _, i := range s.pending {
		left[i] = true
	}
	timer := time.NewTimer(time.Until(s.until))
	defer timer.Stop()
	for len(left) > 0 {
		select {
		case r := <-s.ch:
			if !silent(r.err) {
				delete(left, r.node)
				continue
			}
			return sortedKeys(left) // it timed out: so did every other
		case <-timer.C:
			return sortedKeys(left)
		}
	}
	return nil
}

func sortedKeys(m map[int]bool) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// fanLate is fanFrom that also returns the calls still on their way when
// decided settled the outcome.
func fanLate[T any](ctx, base context.Context, nodes []int, timeout time.Duration,
	f func(ctx context.Context, node int) (T, error), decided func(got []reply[T], pending int) bool) ([]reply[T], *stragglers[T], error) {
	until := time.Now().Add(timeout)
	ch := make(chan reply[T], len(nodes))
	for _, i := range nodes {
		go func() {
			nctx, cancel := context.WithTimeout(base, timeout)
			defer cancel()
			v, err := f(nctx, i)
			if err != nil && base.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)) {
				err = errNoAnswer(timeout) // the node's timeout, not the caller's context
			}
			ch <- reply[T]{node: i, val: v, err: err}
		}()
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	got := make([]reply[T], 0, len(nodes))
	answered := map[int]bool{}
	for len(got) < len(nodes) && (decided == nil || !decided(got, len(nodes)-len(got))) {
		select {
		case r := <-ch:
			got = append(got, r)
			answered[r.node] = true
			continue
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-timer.C:
		}
		for _, i := range nodes {
			if !answered[i] {
				got = append(got, reply[T]{node: i, err: errNoAnswer(timeout)})
				answered[i] = true
			}
		}
		break
	}
	late := &stragglers[T]{ch: ch, until: until}
	for _, i := range nodes {
		if !answered[i] {
			late.pending = append(late.pending, i)
		}
	}
	slices.SortFunc(got, func(a, b reply[T]) int { return a.node - b.node })
	return got, late, nil
}

// all returns the indexes of every node.
func (d *Driver) all() []int {
	nodes := make([]int, len(d.nodes))
	for i := range nodes {
		nodes[i] = i
	}
	return nodes
}

// count returns how many replies have no error.
func count[T any](got []reply[T]) int {
	n := 0
	for _, r := range got {
		if r.err == nil {
			n++
		}
	}
	return n
}

// quorumDecided settles a request that needs quorum successes: it has them, or
// can no longer get them.
func (d *Driver) quorumDecided(ok, pending int) bool {
	return ok >= d.quorum || ok+pending < d.quorum
}

// nodeErrors joins the errors of the replies, each naming its node. Those for
// which keep is false (nil keeps all) are kept as text only, so that a node's
// answer that did not decide the outcome (a busy node in a request that failed
// for want of answers) does not make the whole error match its sentinel.
func nodeErrors[T any](got []reply[T], keep func(error) bool) error {
	var errs []error
	for _, r := range got {
		if r.err == nil {
			continue
		}
		err := flatten(r.err)
		if keep != nil && !keep(r.err) {
			err = errors.New(r.err.Error())
		}
		errs = append(errs, &NodeError{Node: r.node, Err: err})
	}
	return errors.Join(errs...)
}

// failure reports whether err is a node that failed to answer or said "not
// now", as opposed to one that answered no (busy, not held, foreign data,
// refused).
func failure(err error) bool {
	return errors.Is(err, dlock.ErrUnavailable) && !errors.Is(err, dlock.ErrRefused)
}

// flatten keeps the text of a node's failure to connect but not its type: the
// request as a whole did reach the other nodes, and must not read as never sent
// (which would spare it the clean-up of a give-up).
func flatten(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return &unreachable{msg: err.Error()}
	}
	return err
}

// unreachable is a node's failure to connect, as text; it matches
// dlock.ErrUnavailable.
type unreachable struct{ msg string }

func (e *unreachable) Error() string { return e.msg }

// Is makes an unreachable match dlock.ErrUnavailable.
func (e *unreachable) Is(target error) bool { return target == dlock.ErrUnavailable }

// NodeError is the failure of one node within a Redlock request; errors returned
// by the driver join one per failed node (errors.As finds the first).
type NodeError struct {
	Node int // the node's index in the list given to NewDriver
	Err  error
}

// Error names the node and its error.
func (e *NodeError) Error() string { return fmt.Sprintf("node %d: %v", e.Node, e.Err) }

// Unwrap returns the node's error.
func (e *NodeError) Unwrap() error { return e.Err }

// holding is the Grant.Handle of a Redlock holding: the nodes that granted it,
// and what is known of the others' attempts.
type holding struct {
	granted []int
	silent  []int                    // nodes whose attempt did not answer in time
	late    *stragglers[dlock.Grant] // attempts still on their way when the majority granted

	once   sync.Once
	unsure map[int]bool // silent, and late ones that never answered
}

// unknown waits (at most the node timeout) for the attempts that were still on
// their way when the acquisition returned, and returns the nodes on which an
// attempt may still land: they are abandoned rather than released, so that it
// cannot. A release on a node whose attempt has answered cannot be overtaken by
// it.
func (h *holding) unknown() map[int]bool {
	if h == nil {
		return nil
	}
	h.once.Do(func() {
		h.unsure = map[int]bool{}
		for _, i := range h.silent {
			h.unsure[i] = true
		}
		for _, i := range h.late.wait() {
			h.unsure[i] = true
		}
	})
	return h.unsure
}

// Acquire implements dlock.Driver: the acquire script of redislock's mutex on
// every node, a majority needed; then the largest token of the majority is
// recorded on it and handed out.
func (d *Driver) Acquire(ctx context.Context, r dlock.AcquireRequest) (dlock.Grant, error) {
	timeout := d.nodeTimeout(r.TTL)
	if err := d.identifyAll(ctx, timeout); err != nil {
		return dlock.Grant{}, err
	}
	nr := r
	nr.Handle = nil
	// Settled early by a majority of grants; a failure waits for every node (up
	// to the timeout), so that it knows which ones to release. A node is asked
	// what server it is before its first request: no node takes part before it
	// has been compared with the others that have answered.
	got, late, err := fanLate(ctx, ctx, d.all(), timeout, func(ctx context.Context, i int) (dlock.Grant, error) {
		if err := d.identify(ctx, i); err != nil {
			return dlock.Grant{}, err
		}
		return d.nodes[i].Acquire(ctx, nr)
	}, func(got []reply[dlock.Grant], _ int) bool {
		return count(got) >= d.quorum
	})
	if err != nil {
		return dlock.Grant{}, err // the Client abandons the acquisition on every node
	}
	if dup := d.duplicate(); dup != nil {
		return dlock.Grant{}, d.refuseDuplicate(ctx, r, dup)
	}
	var yes, quiet []int
	var top uint64
	for _, g := range got {
		switch {
		case g.err == nil:
			yes = append(yes, g.node)
			top = max(top, g.val.Token)
		case silent(g.err):
			quiet = append(quiet, g.node)
		}
	}
	if len(yes) < d.quorum {
		return dlock.Grant{}, d.refused(ctx, r, got, timeout)
	}
	if err := d.raise(ctx, r, got, top, timeout); err != nil {
		d.releaseNodes(ctx, r.Key, r.Owner, d.all(), timeout)
		return dlock.Grant{}, err
	}
	return dlock.Grant{Token: top, TTL: r.TTL, Handle: &holding{granted: yes, silent: quiet, late: late}}, nil
}

// raise records top, the largest token the granting majority drew, on that
// majority: on each granting node that drew less (the ones that drew top have it
// already). It fails unless a majority then holds the lock with a counter at
// top or above.
func (d *Driver) raise(ctx context.Context, r dlock.AcquireRequest, got []reply[dlock.Grant], top uint64, timeout time.Duration) error {
	have := 0
	var below []int
	for _, g := range got {
		switch {
		case g.err != nil:
		case g.val.Token == top:
			have++
		default:
			below = append(below, g.node)
		}
	}
	if have >= d.quorum {
		return nil
	}
	need := d.quorum - have
	token := strconv.FormatUint(top, 10)
	keys := []string{redislock.LockKey(r.Key), redislock.FenceKey(r.Key)}
	res, err := fan(ctx, below, timeout, func(ctx context.Context, i int) (bool, error) {
		n, err := redisscript.Raise.Run(ctx, d.rdbs[i], keys, r.Owner, token, fenceRetentionMS).Int64()
		if err != nil {
			return false, mapErr(err)
		}
		if n != 1 {
			return false, fmt.Errorf("%w: the holding expired before its token was recorded", dlock.ErrNotHeld)
		}
		return true, nil
	}, func(got []reply[bool], pending int) bool {
		ok := count(got)
		return ok >= need || ok+pending < need
	})
	if err != nil {
		return err
	}
	if count(res) >= need {
		return nil
	}
	return fmt.Errorf("%w: redlock: granted by %d of %d nodes, but the fencing token could be recorded on %d only (%d needed): %w",
		dlock.ErrUnavailable, count(got), len(d.nodes), have+count(res), d.quorum, nodeErrors(res, failure))
}

// refused cleans up after an acquisition that no majority granted (the nodes
// that granted it and those that did not answer are released) and returns the
// error that explains the outcome: a *dlock.BusyError when holders elsewhere
// kept the majority out, an error matching dlock.ErrUnavailable when failed
// nodes did, and otherwise the nodes' own refusal (dlock.ErrConflict...).
func (d *Driver) refused(ctx context.Context, r dlock.AcquireRequest, got []reply[dlock.Grant], timeout time.Duration) error {
	var yes, unknown, failed int
	var busy []time.Duration
	var cleanup []int
	var final error
	for _, g := range got {
		var b *dlock.BusyError
		switch {
		case g.err == nil:
			yes++
			cleanup = append(cleanup, g.node)
		case errors.As(g.err, &b):
			busy = append(busy, b.Remaining)
		case errors.Is(g.err, dlock.ErrRefused), errors.Is(g.err, dlock.ErrConflict), errors.Is(g.err, dlock.ErrInvalid),
			errors.Is(g.err, dlock.ErrNotObtained): // refused, foreign data, or an abandoned acquisition
			if final == nil {
				final = &NodeError{Node: g.node, Err: g.err}
			}
		default: // no answer, a network failure, or "not now": it may have landed
			failed++
			unknown++
			cleanup = append(cleanup, g.node)
		}
	}
	if len(cleanup) > 0 {
		d.releaseNodes(ctx, r.Key, r.Owner, cleanup, timeout)
	}
	switch {
	case yes+failed >= d.quorum:
		return fmt.Errorf("%w: redlock: %d of %d nodes granted the lock, %d needed: %w",
			dlock.ErrUnavailable, yes, len(d.nodes), d.quorum, nodeErrors(got, failure))
	case yes+failed+len(busy) >= d.quorum:
		// The lock is free for us once enough holdings elsewhere end.
		slices.Sort(busy)
		rem := time.Duration(-1)
		if k := d.quorum - yes - failed - 1; k >= 0 && k < len(busy) && busy[0] >= 0 {
			rem = busy[k]
		}
		return &dlock.BusyError{Remaining: rem, Queued: unknown > 0}
	}
	return fmt.Errorf("redlock: %d of %d nodes granted the lock, %d needed: %w", yes, len(d.nodes), d.quorum, final)
}

// releaseNodes releases owner's holding of key on nodes, waiting at most timeout.
// The releases run detached from ctx's cancellation, each bounded by timeout as
// every call of a fan is.
func (d *Driver) releaseNodes(ctx context.Context, key, owner string, nodes []int, timeout time.Duration) {
	ctx = context.WithoutCancel(ctx)
	h := dlock.Holding{Key: key, Owner: owner}
	_, _ = fan(ctx, nodes, timeout, func(ctx context.Context, i int) (struct{}, error) {
		return struct{}{}, d.nodes[i].Release(ctx, h)
	}, nil)
}

// Extend implements dlock.Driver: the holding is extended on every node that
// still holds it, and the extend succeeds when a majority did. It fails with
// dlock.ErrNotHeld when so many nodes no longer hold it that no majority can.
func (d *Driver) Extend(ctx context.Context, h dlock.Holding, ttl time.Duration) (time.Duration, error) {
	nh := h
	nh.Handle = nil
	// The extends still on their way when a majority has answered go on: a
	// holding extended on every node survives the loss of more of them.
	got, err := fanFrom(ctx, context.WithoutCancel(ctx), d.all(), d.settleTimeout(ttl), func(ctx context.Context, i int) (time.Duration, error) {
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

// noQuorum is the error of a request about a holding that fewer than a majority
// of nodes carried out: dlock.ErrNotHeld when a majority can no longer hold it,
// and otherwise an error matching dlock.ErrUnavailable.
func (d *Driver) noQuorum(what string, got []reply[time.Duration]) error {
	gone := 0
	for _, r := range got {
		if errors.Is(r.err, dlock.ErrNotHeld) || errors.Is(r.err, dlock.ErrConflict) {
			gone++
		}
	}
	if gone > len(d.nodes)-d.quorum {
		return fmt.Errorf("%w: redlock: %d of %d nodes no longer hold the lock: %w", dlock.ErrNotHeld, gone, len(d.nodes), nodeErrors(got, nil))
	}
	return fmt.Errorf("%w: redlock: %s by %d of %d nodes, %d needed: %w",
		dlock.ErrUnavailable, what, count(got), len(d.nodes), d.quorum, nodeErrors(got, failure))
}

// Release implements dlock.Driver: the holding is released on every node, after
// the acquisition's attempts still on their way have answered; it is abandoned
// (see redislock's Driver.Abandon) on the nodes where an attempt may still
// land. It succeeds when a majority released it, and fails with
// dlock.ErrNotHeld when a majority did not hold it any more.
func (d *Driver) Release(ctx context.Context, h dlock.Holding) error {
	nh := h
	nh.Handle = nil
	// The releases still on their way when a majority has answered must not
	// be cut short by a caller that cancels its context on return: they run
	// detached, each bounded by the node timeout.
	ctx = context.WithoutCancel(ctx)
	hd, _ := h.Handle.(*holding)
	unknown := hd.unknown()
	got, err := fan(ctx, d.all(), d.settleTimeout(h.TTL), func(ctx context.Context, i int) (time.Duration, error) {
		if unknown[i] {
			return 0, d.nodes[i].Abandon(ctx, nh)
		}
		return 0, d.nodes[i].Release(ctx, nh)
	}, func(got []reply[time.Duration], _ int) bool {
		return count(got) >= d.quorum // the other releases are on their way
	})
	if err != nil {
		return err
	}
	if count(got) >= d.quorum {
		return nil
	}
	return d.noQuorum("released", got)
}

// TTL implements dlock.Driver: the time until fewer than a majority of the nodes
// hold the lock, as the nodes see it.
func (d *Driver) TTL(ctx context.Context, h dlock.Holding) (time.Duration, error) {
	nh := h
	nh.Handle = nil
	got, err := fan(ctx, d.all(), d.settleTimeout(h.TTL), func(ctx context.Context, i int) (time.Duration, error) {
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

// Abandon implements dlock.Abandoner: redislock's abandon (release, and a mark
// that stops a late attempt) on every node.
func (d *Driver) Abandon(ctx context.Context, h dlock.Holding) error {
	nh := h
	nh.Handle = nil
	// The abandons run detached, each bounded as an extend is; the caller waits
	// for them no longer than an acquisition waits for its nodes.
	cctx, cancel := context.WithTimeout(ctx, d.nodeTimeout(h.TTL))
	defer cancel()
	got, err := fanFrom(cctx, context.WithoutCancel(ctx), d.all(), d.settleTimeout(h.TTL), func(ctx context.Context, i int) (struct{}, error) {
		return struct{}{}, d.nodes[i].Abandon(ctx, nh)
	}, nil)
	if err != nil {
		return err
	}
	if errs := nodeErrors(got, nil); errs != nil {
		return fmt.Errorf("%w: redlock: abandon: %w", dlock.ErrUnavailable, errs)
	}
	return nil
}

// Subscribe implements dlock.Notifier: the waiter subscribes on every node, and
// a wake from any node wakes it. It fails only when no node could subscribe; the
// channel closes when every node's notifications have stopped.
func (d *Driver) Subscribe(ctx context.Context, h dlock.Holding) (<-chan struct{}, func(), error) {
	nh := h
	nh.Handle = nil
	var (
		chans   []<-chan struct{}
		cancels []func()
		errs    []error
	)
	for i, nd := range d.nodes {
		ch, cancel, err := nd.Subscribe(ctx, nh)
		if err != nil {
			errs = append(errs, &NodeError{Node: i, Err: err})
			continue
		}
		chans, cancels = append(chans, ch), append(cancels, cancel)
	}
	if len(chans) == 0 {
		return nil, nil, fmt.Errorf("redlock: no node could subscribe: %w", errors.Join(errs...))
	}
	wake := make(chan struct{}, 1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var open atomic.Int32
	open.Store(int32(len(chans)))
	for _, ch := range chans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case _, ok := <-ch:
					if !ok {
						if open.Add(-1) == 0 {
							close(wake) // every node's notifications stopped: poll
						}
						return
					}
					select {
					case wake <- struct{}{}:
					default:
					}
				}
			}
		}()
	}
	var once sync.Once
	return wake, func() {
		once.Do(func() {
			close(stop)
			wg.Wait()
			for _, c := range cancels {
				c()
			}
		})
	}, nil
}

// mapErr turns a go-redis error into one matching the dlock sentinels.
func mapErr(err error) error { return redisscript.MapErr("redlock", err) }
