package verify

import (
	"math"
	"sort"
	"time"
)

// OpResize is a history's operation that changes a semaphore's size (Value)
// for every Client (Client.Resize), made by the test process during runs of a
// Spec with Resize set.
const OpResize = "resize"

// resizeOp is a resize of the history: its invocation and completion (Info
// when its outcome is unknown).
type resizeOp struct{ inv, end Event }

// sizeDuring returns the largest size of the semaphore key that may have been
// in force at some instant of [x, y]: the size set by the last resize known to
// have completed before x (N when none), and that of every resize that may
// have taken effect within it (one of unknown outcome from its invocation on,
// until a resize invoked more than resizeLand after it returned completed).
func (a *Analysis) sizeDuring(key string, x, y int64) int {
	size := a.P.N
	rs := a.resizes[key]
	for _, r := range rs {
		if r.end.Type == OK && r.end.T <= x {
			size = int(r.end.Value)
		}
	}
	most := size
	for _, r := range rs {
		settled := r.end.Type == OK && r.end.T <= x || a.overridden(rs, r, x)
		if r.inv.T <= y && !settled {
			most = max(most, int(r.inv.Value))
		}
	}
	return most
}

// resizeLand is how long after a resize of unknown outcome returned it may
// still land: its request, sent before, on a connection the faults do not
// touch, is executed by then or never.
const resizeLand = 2 * time.Second

// overridden reports whether the resize r, of unknown outcome, can no
// longer be in force at x: a resize invoked more than resizeLand after r
// returned completed by x.
func (a *Analysis) overridden(rs []resizeOp, r resizeOp, x int64) bool {
	if r.end.Type != Info || r.end.T == math.MaxInt64 {
		return false
	}
	for _, o := range rs {
		if o.end.Type == OK && o.inv.T > r.end.T+int64(resizeLand) && o.end.T <= x {
			return true
		}
	}
	return false
}

// sortResizes orders each key's resizes by invocation.
func (a *Analysis) sortResizes() {
	for _, rs := range a.resizes {
		sort.Slice(rs, func(i, j int) bool { return rs[i].inv.T < rs[j].inv.T })
	}
}

// semLimit returns the most holders a semaphore may have had when b was
// granted, over holders valid at its completion: the largest size in force
// from the earliest moment the last of them can have been granted (b's
// invocation, or that of a holder that completed after it) to b's completion.
func (a *Analysis) semLimit(key string, b *grant, over []*grant) int {
	if len(a.resizes[key]) == 0 {
		return a.P.N
	}
	x := b.inv.T
	for _, g := range over {
		if g.ok.T > b.inv.T {
			x = min(x, g.inv.T)
		}
	}
	return a.sizeDuring(key, x, b.ok.T)
}

// lastResize returns the last resize of key invoked before t, or nil.
func (a *Analysis) lastResize(key string, t int64) *resizeOp {
	var last *resizeOp
	for i, r := range a.resizes[key] {
		if r.inv.T < t {
			last = &a.resizes[key][i]
		}
	}
	return last
}
