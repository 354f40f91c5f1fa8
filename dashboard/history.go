package dashboard

import (
	"time"
)

// history is a ring of buckets of one lock (or of the totals).
type history struct {
	b []bucket
}

type bucket struct {
	id      int64 // the bucket's start time / width; 0 unused
	acqs    float32
	waiters int32
	held    float32
}

func (h *history) add(now time.Time, width time.Duration, acqs float64, waiters int, held float64) {
	if h.b == nil {
		h.b = make([]bucket, historyPoints)
	}
	id := now.UnixNano() / int64(width)
	b := &h.b[id%historyPoints]
	if b.id != id {
		*b = bucket{id: id}
	}
	b.acqs += float32(acqs)
	b.waiters = max(b.waiters, int32(min(waiters, 1<<30)))
	b.held = max(b.held, float32(held))
}

// points returns the buckets of the last historyPoints widths up to now, oldest
// first; empty buckets are zero points, and none at all is an empty slice.
// For the totals (sum) a bucket's held is the locks held, else the longest time.
func (h *history) points(now time.Time, width time.Duration) []Point {
	out := make([]Point, 0, historyPoints)
	if h.b == nil {
		return out
	}
	last := now.UnixNano() / int64(width)
	for id := last - historyPoints + 1; id <= last; id++ {
		if id < 0 {
			continue
		}
		p := Point{Time: time.Unix(0, id*int64(width))}
		if b := h.b[id%historyPoints]; b.id == id {
			span := width
			if id == last {
				span = max(now.Sub(p.Time), width/10)
			}
			p.Rate = float64(b.acqs) / span.Seconds()
			p.Waiters = int(b.waiters)
			p.Held = float64(b.held)
		}
		out = append(out, p)
	}
	return out
}
