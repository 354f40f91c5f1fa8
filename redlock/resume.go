package redlock

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/driver"
)

var _ driver.Resumer = (*Driver)(nil)

// Resume implements driver.Resumer: redislock's resume script on every node
// (the lock record extended to h.TTL where h.Owner holds it with token, never
// created), a majority needed, as an acquisition's. The acquisition recorded
// its token on the majority that granted it (see Acquire): a node that never
// recorded it, or no longer holds the lock, does not take part. The nodes'
// loss signals are combined as an acquisition's are, and the holding releases
// as one acquired here would.
func (d *Driver) Resume(ctx context.Context, h driver.Holding, token uint64) (driver.Grant, error) {
	timeout := d.nodeTimeout(h.TTL)
	if err := d.identifyAll(ctx, timeout); err != nil {
		return driver.Grant{}, err
	}
	nh := h
	nh.Handle = nil
	sigs := &nodeSignals{}
	got, late, err := askNodesWithStragglers(ctx, ctx, d.all(), timeout, func(ctx context.Context, i int) (driver.Grant, error) {
		if err := d.identify(ctx, i); err != nil {
			return driver.Grant{}, err
		}
		g, err := d.nodes[i].Resume(ctx, nh, token)
		sigs.take(i, &g)
		return g, err
	}, func(got []reply[driver.Grant], _ int) bool {
		return count(got) >= d.quorum
	})
	if err != nil {
		sigs.settle(nil, nil, 0)
		return driver.Grant{}, err
	}
	var yes, quiet []int
	answers := make([]reply[time.Duration], 0, len(got))
	for _, g := range got {
		switch {
		case g.err == nil:
			yes = append(yes, g.node)
		case silent(g.err):
			quiet = append(quiet, g.node)
		}
		answers = append(answers, reply[time.Duration]{node: g.node, err: g.err})
	}
	if dup := d.duplicate(); dup != nil {
		sigs.settle(nil, nil, 0)
		return driver.Grant{}, dup
	}
	if len(yes) < d.quorum {
		sigs.settle(nil, nil, 0)
		return driver.Grant{}, d.noQuorum("resumed", answers)
	}
	g := driver.Grant{Token: token, TTL: h.TTL, Handle: &holding{token: token, granted: yes, silent: quiet, late: late}}
	if q := sigs.settle(yes, late.nodes(), d.quorum); q != nil {
		g.Lost = q
	}
	return g, nil
}
