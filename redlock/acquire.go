package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock/internal/redisscript"
	"github.com/dlock-go/dlock/redislock"
)

// holding is the Grant.Handle of a Redlock holding: the nodes that granted it,
// and what is known of the others' attempts.
type holding struct {
	token   uint64 // the token handed out, which each node's release records
	granted []int
	silent  []int                     // nodes whose attempt did not answer in time
	late    *stragglers[driver.Grant] // attempts still on their way when the majority granted

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

// Acquire implements driver.Driver: the acquire script of redislock's mutex on
// every node, a majority needed; then the largest token of the majority is
// recorded on it and handed out. The release records that token on every node
// (see Release), so that the nodes' next tokens agree, and the recording round
// is needed only after the nodes' counters diverged (a failed node, a lock
// taken for the first time, or once its last holding ran out). A waiting
// attempt keeps its places in the nodes' waiting sets until its waiter has
// subscribed (see waits): its busy reply carries them as its Handle, which
// Subscribe, the next attempt or Abandon lets go.
func (d *Driver) Acquire(ctx context.Context, r driver.AcquireRequest) (driver.Grant, error) {
	timeout := d.nodeTimeout(r.TTL)
	if err := d.identifyAll(ctx, timeout); err != nil {
		return driver.Grant{}, err
	}
	nr := r
	// A node that a clean-up of an earlier attempt has yet to reach grants
	// this one a holding with a new token, which that clean-up leaves alone.
	nr.Handle = redisscript.Retake{}
	if w, ok := r.Handle.(*waits); ok {
		w.end() // the last attempt's, whose waiter did not subscribe
	}
	var ws *waits
	if r.Waiting {
		ws = &waits{caller: ctx}
	}
	sigs := &nodeSignals{}
	// Settled early by a majority of grants; a failure waits for every node (up
	// to the timeout), so that it knows which ones to release. A node is asked
	// what server it is before its first request: no node takes part before it
	// has been compared with the others that have answered.
	got, late, err := askNodesWithStragglers(ctx, ctx, d.all(), timeout, func(ctx context.Context, i int) (driver.Grant, error) {
		if err := d.identify(ctx, i); err != nil {
			return driver.Grant{}, err
		}
		var g driver.Grant
		var err error
		if ws != nil {
			g, err = ws.acquire(ctx, d.nodes[i], nr)
		} else {
			g, err = d.nodes[i].Acquire(ctx, nr)
		}
		sigs.take(i, &g)
		return g, err
	}, func(got []reply[driver.Grant], _ int) bool {
		return count(got) >= d.quorum
	})
	if err != nil {
		ws.end()
		sigs.settle(nil, nil, 0)
		return driver.Grant{}, err // the Client abandons the acquisition on every node
	}
	g, err := d.settle(ctx, r, got, late, timeout)
	if hd, ok := g.Handle.(*holding); ok && err == nil {
		if q := sigs.settle(hd.granted, late.nodes(), d.quorum); q != nil {
			g.Lost = q
		}
	} else {
		sigs.settle(nil, nil, 0)
	}
	var busy *driver.Taken
	if errors.As(err, &busy) && ws != nil {
		// The waiter subscribes next: the nodes keep its places until then.
		busy.Handle = ws
	} else {
		ws.end()
	}
	return g, err
}

// settle is the outcome of an acquisition whose nodes answered got.
func (d *Driver) settle(ctx context.Context, r driver.AcquireRequest, got []reply[driver.Grant], late *stragglers[driver.Grant], timeout time.Duration) (driver.Grant, error) {
	if dup := d.duplicate(); dup != nil {
		return driver.Grant{}, d.refuseDuplicate(ctx, r, dup)
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
		return driver.Grant{}, d.refused(ctx, r, got, timeout)
	}
	if raised, err := d.raise(ctx, r, got, top, timeout); err != nil {
		d.cleanUp(ctx, r, got, raised, top, timeout)
		return driver.Grant{}, err
	}
	return driver.Grant{Token: top, TTL: r.TTL, Handle: &holding{token: top, granted: yes, silent: quiet, late: late}}, nil
}

// Info implements driver.Driver: a mutex on a quorum of Redis masters.
func (d *Driver) Info() driver.DriverInfo {
	return driver.DriverInfo{Backend: "redlock", Kind: driver.KindMutex}
}

// raise records top, the largest token the granting majority drew, on that
// majority: on each granting node that drew less (the ones that drew top have it
// already). It fails unless a majority then holds the lock with a counter at
// top or above, and returns the nodes that said they recorded it.
func (d *Driver) raise(ctx context.Context, r driver.AcquireRequest, got []reply[driver.Grant], top uint64, timeout time.Duration) (map[int]bool, error) {
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
		return nil, nil
	}
	need := d.quorum - have
	token := strconv.FormatUint(top, 10)
	keys := []string{redislock.LockKey(r.Key)}
	res, err := askNodes(ctx, below, timeout, func(ctx context.Context, i int) (bool, error) {
		n, err := redisscript.Raise.Run(ctx, d.rdbs[i], keys, r.Owner, token).Int64()
		if err != nil {
			return false, mapErr(err)
		}
		if n != 1 {
			return false, fmt.Errorf("%w: the holding expired before its token was recorded", driver.ErrNotHeld)
		}
		return true, nil
	}, func(got []reply[bool], pending int) bool {
		ok := count(got)
		return ok >= need || ok+pending < need
	})
	if err != nil {
		return nil, err
	}
	if count(res) >= need {
		return nil, nil
	}
	raised := map[int]bool{}
	for _, g := range res {
		if g.err == nil {
			raised[g.node] = true
		}
	}
	return raised, fmt.Errorf("%w: redlock: granted by %d of %d nodes, but the fencing token could be recorded on %d only (%d needed): %w",
		driver.ErrUnavailable, count(got), len(d.nodes), have+count(res), d.quorum, nodeErrors(res, failure))
}

// refused cleans up after an acquisition that no majority granted (the nodes
// that granted it are released, see cleanUp) and returns the
// error that explains the outcome: a *driver.Taken when holders elsewhere
// kept the majority out, an error matching dlock.ErrUnavailable when failed
// nodes did, and otherwise the nodes' own refusal (dlock.ErrConflict...).
func (d *Driver) refused(ctx context.Context, r driver.AcquireRequest, got []reply[driver.Grant], timeout time.Duration) error {
	var yes, unknown, failed int
	var busy []time.Duration
	var final error
	for _, g := range got {
		var b *driver.Taken
		switch {
		case g.err == nil:
			yes++
		case errors.As(g.err, &b):
			busy = append(busy, b.Remaining)
		case errors.Is(g.err, driver.ErrRefused), errors.Is(g.err, driver.ErrConflict), errors.Is(g.err, driver.ErrInvalid),
			errors.Is(g.err, driver.ErrNotObtained): // refused, foreign data, or an abandoned acquisition
			if final == nil {
				final = &NodeError{Node: g.node, Err: g.err}
			}
		default: // no answer, a network failure, or "not now": it may have landed
			failed++
			unknown++
		}
	}
	d.cleanUp(ctx, r, got, nil, 0, timeout)
	switch {
	case yes+failed >= d.quorum:
		return fmt.Errorf("%w: redlock: %d of %d nodes granted the lock, %d needed: %w",
			driver.ErrUnavailable, yes, len(d.nodes), d.quorum, nodeErrors(got, failure))
	case yes+failed+len(busy) >= d.quorum:
		// The lock is free for us once enough holdings elsewhere end.
		slices.Sort(busy)
		rem := time.Duration(-1)
		if k := d.quorum - yes - failed - 1; k >= 0 && k < len(busy) && busy[0] >= 0 {
			rem = busy[k]
		}
		return &driver.Taken{Remaining: rem, Queued: unknown > 0}
	}
	return fmt.Errorf("redlock: %d of %d nodes granted the lock, %d needed: %w", yes, len(d.nodes), d.quorum, final)
}

// cleanUp releases the holdings that the nodes in got granted to an attempt
// that failed, waiting at most timeout: on each node, only a holding with the
// token that node drew, or top on the nodes that said raise recorded it there.
// The next attempt of the acquisition (the same owner) takes a holding anew
// with a token above the one there (see Acquire), so that a clean-up held up in
// the network, which may land after that attempt's grant, cannot remove it: a
// lease must never count a node whose holding is gone. The nodes that did not
// answer, and those whose raise did not, may hold another token: they are not
// released. The next attempt takes them anew, the Client abandons every node
// when the acquisition ends, and a holding left meanwhile runs out with its
// TTL. The releases run detached from ctx's cancellation, each bounded by
// timeout as every call of askNodes is.
func (d *Driver) cleanUp(ctx context.Context, r driver.AcquireRequest, got []reply[driver.Grant], raised map[int]bool, top uint64, timeout time.Duration) {
	drawn := map[int]uint64{}
	var nodes []int
	for _, g := range got {
		switch {
		case g.err != nil:
		case raised[g.node]:
			drawn[g.node] = top
		default:
			drawn[g.node] = g.val.Token
		}
		if g.err == nil {
			nodes = append(nodes, g.node)
		}
	}
	if len(nodes) == 0 {
		return
	}
	ctx = context.WithoutCancel(ctx)
	_, _ = askNodes(ctx, nodes, timeout, func(ctx context.Context, i int) (struct{}, error) {
		h := driver.Holding{Key: r.Key, Owner: r.Owner, Handle: redisscript.Drawn{Token: drawn[i]}}
		return struct{}{}, d.nodes[i].Release(ctx, h)
	}, nil)
}
