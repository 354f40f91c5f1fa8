package redlock

import (
	"context"
	"errors"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// reply is one node's answer to a request sent to several nodes.
type reply[T any] struct {
	node int
	val  T
	err  error
}

// askNodes calls f on the given nodes in parallel, each under ctx bounded by timeout,
// and collects their replies until decided reports that the replies so far settle
// the outcome, every node has answered, or the timeout has passed. The replies
// are in node order; a node that did not answer in time has errNoAnswer (its
// call may still land). It returns ctx's error when ctx ended first. The calls
// not collected finish on their own: the channel has room for every reply.
func askNodes[T any](ctx context.Context, nodes []int, timeout time.Duration,
	f func(ctx context.Context, node int) (T, error), decided func(got []reply[T], pending int) bool) ([]reply[T], error) {
	return askNodesDetached(ctx, ctx, nodes, timeout, f, decided)
}

// askNodesDetached is askNodes with the calls made under base (bounded by
// timeout) and the collection under ctx: with a base detached from ctx, the
// calls still on their way when the outcome is settled are not cut short by the
// caller cancelling ctx on return.
func askNodesDetached[T any](ctx, base context.Context, nodes []int, timeout time.Duration,
	f func(ctx context.Context, node int) (T, error), decided func(got []reply[T], pending int) bool) ([]reply[T], error) {
	got, _, err := askNodesWithStragglers(ctx, base, nodes, timeout, f, decided)
	return got, err
}

// stragglers are the calls of askNodes still on their way when decided settled it.
type stragglers[T any] struct {
	ch      <-chan reply[T]
	pending []int
	until   time.Time // their node timeout
}

// waitUntil is wait with the wait ending at t at the latest.
func (s *stragglers[T]) waitUntil(t time.Time) {
	if s != nil && t.Before(s.until) {
		s.until = t
	}
	s.wait()
}

// nodes returns the nodes whose calls were still on their way.
func (s *stragglers[T]) nodes() []int {
	if s == nil {
		return nil
	}
	return s.pending
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

// askNodesWithStragglers is askNodesDetached that also returns the calls still
// on their way when decided settled the outcome. The calls share one context
// bounded by timeout, which the last of them to answer cancels, and run on
// workers (see driver.Go).
func askNodesWithStragglers[T any](ctx, base context.Context, nodes []int, timeout time.Duration,
	f func(ctx context.Context, node int) (T, error), decided func(got []reply[T], pending int) bool) ([]reply[T], *stragglers[T], error) {
	if len(nodes) == 0 {
		return nil, nil, nil
	}
	nctx, cancel := bounded(base, timeout)
	until, _ := nctx.Deadline()
	ch := make(chan reply[T], len(nodes))
	left := new(atomic.Int32)
	left.Store(int32(len(nodes)))
	for _, i := range nodes {
		driver.Go(func() {
			v, err := f(nctx, i)
			if err != nil && base.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)) {
				err = errNoAnswer(timeout) // the node's timeout, not the caller's context
			}
			ch <- reply[T]{node: i, val: v, err: err}
			if left.Add(-1) == 0 {
				cancel() // every reply is in ch
			}
		})
	}
	got := make([]reply[T], 0, len(nodes))
	answered := make([]bool, slices.Max(nodes)+1)
	open := func() bool { return len(got) < len(nodes) && (decided == nil || !decided(got, len(nodes)-len(got))) }
	for open() {
		select {
		case r := <-ch:
			got = append(got, r)
			answered[r.node] = true
			continue
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-nctx.Done():
		}
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		// The timeout has passed, or every node has answered (the replies are
		// in ch then): the replies in ch are all there is.
		for drained := false; !drained && open(); {
			select {
			case r := <-ch:
				got = append(got, r)
				answered[r.node] = true
			default:
				drained = true
			}
		}
		if !open() {
			break
		}
		for _, i := range nodes {
			if !answered[i] {
				got = append(got, reply[T]{node: i, err: errNoAnswer(timeout)})
				answered[i] = true
			}
		}
	}
	var late *stragglers[T]
	for _, i := range nodes {
		if !answered[i] {
			if late == nil {
				late = &stragglers[T]{ch: ch, until: until}
			}
			late.pending = append(late.pending, i)
		}
	}
	slices.SortFunc(got, func(a, b reply[T]) int { return a.node - b.node })
	return got, late, nil
}

// bounded is context.WithTimeout; askNodesWithStragglers' last call cancels it.
func bounded(base context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(base, timeout)
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
