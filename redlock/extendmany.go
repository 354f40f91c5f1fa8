package redlock

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/driver"
)

var _ driver.BatchExtender = (*Driver)(nil)

// ExtendMany implements driver.BatchExtender: the holdings go to every node in
// parallel, each node's share as one pipeline of batch extend scripts (see
// redislock's ExtendBatch), and each holding is extended when a majority of
// the nodes extended it, exactly as Extend decides for one.
func (d *Driver) ExtendMany(ctx context.Context, reqs []driver.ExtendRequest) []driver.ExtendResult {
	nreqs := make([]driver.ExtendRequest, len(reqs))
	var longest time.Duration
	for i, r := range reqs {
		nreqs[i] = r
		nreqs[i].Holding.Handle = nil
		longest = max(longest, r.TTL)
	}
	out := make([]driver.ExtendResult, len(reqs))
	// As Extend: the extends still on their way once every holding is decided
	// go on, detached from the caller.
	got, err := askNodesDetached(ctx, context.WithoutCancel(ctx), d.all(), d.settleTimeout(longest), func(ctx context.Context, i int) ([]driver.ExtendResult, error) {
		return d.nodes[i].ExtendMany(ctx, nreqs), nil
	}, func(got []reply[[]driver.ExtendResult], pending int) bool {
		for j := range nreqs {
			if !d.quorumDecided(count(entry(got, j)), pending) {
				return false
			}
		}
		return true
	})
	for j, r := range reqs {
		switch {
		case err != nil:
			out[j].Err = err
		default:
			e := entry(got, j)
			if count(e) >= d.quorum {
				out[j].TTL = r.TTL
			} else {
				out[j].Err = d.noQuorum("extended", e)
			}
		}
	}
	return out
}

// entry returns every node's reply about the j-th holding of an ExtendMany.
func entry(got []reply[[]driver.ExtendResult], j int) []reply[time.Duration] {
	e := make([]reply[time.Duration], len(got))
	for k, r := range got {
		e[k] = reply[time.Duration]{node: r.node, err: r.err}
		if r.err == nil {
			e[k].val, e[k].err = r.val[j].TTL, r.val[j].Err
		}
	}
	return e
}
