package redlock

import (
	"fmt"
	"sync"

	"github.com/dlock-go/dlock/driver"
)

// Told at once: each node's driver tells of its holding's loss (a
// force-unlock on that master, or its keyspace notifications; see redislock),
// and the lease is lost at once when the masters that still hold it fall below
// the quorum. The rest (a master that restarted empty, an expiry) is found by
// the renewals, as before.

// nodeSignals collects the loss signals of one acquisition's node grants:
// those of the granting majority end up watched by a quorumLoss, every other
// one (a node outside it, a straggler that granted late, a failed
// acquisition's) is let go at once.
type nodeSignals struct {
	mu     sync.Mutex
	sigs   map[int]*driver.LossSignal
	closed bool
	q      *quorumLoss // the holding's, once settled with one
}

// take removes node i's signal from g, keeping it until settled.
func (s *nodeSignals) take(i int, g *driver.Grant) {
	sig, ok := g.Lost.(*driver.LossSignal)
	g.Lost = nil
	if !ok {
		return
	}
	s.mu.Lock()
	if s.closed {
		q := s.q
		s.mu.Unlock()
		if q == nil || g.Token == 0 {
			sig.Unwatch()
			return
		}
		q.add(sig) // a straggler that granted after the majority: it holds too
		return
	}
	if s.sigs == nil {
		s.sigs = map[int]*driver.LossSignal{}
	}
	s.sigs[i] = sig
	s.mu.Unlock()
}

// settle ends the collection: the signals of granted go to the returned
// Grant.Lost (nil when there are none, or when granted is nil: a failed
// acquisition), and the others are let go.
func (s *nodeSignals) settle(granted []int, quorum int) *driver.LossSignal {
	var q *quorumLoss
	if len(granted) > 0 {
		q = &quorumLoss{holding: len(granted), quorum: quorum}
		q.Forgetter = q
	}
	s.mu.Lock()
	s.closed = true
	s.q = q
	sigs := s.sigs
	s.sigs = nil
	s.mu.Unlock()
	var mine []*driver.LossSignal
	if q != nil {
		for _, i := range granted {
			if sig := sigs[i]; sig != nil {
				mine = append(mine, sig)
				delete(sigs, i)
			}
		}
	}
	for _, sig := range sigs {
		sig.Unwatch()
	}
	if q == nil {
		return nil
	}
	q.mu.Lock()
	q.nodes = append(q.nodes, mine...)
	q.mu.Unlock()
	for _, sig := range mine {
		sig.Watch(nodeLoss{q: q, sig: sig})
	}
	return &q.LossSignal
}

// quorumLoss is the loss signal of a Redlock holding: lost when fewer than
// quorum of the masters that granted it still hold it.
type quorumLoss struct {
	driver.LossSignal
	nodes   []*driver.LossSignal
	quorum  int
	mu      sync.Mutex
	holding int  // the masters that granted it and have not said it is gone
	ended   bool // forgotten: the lease ended
}

// add counts a master that granted the holding after the majority did.
func (q *quorumLoss) add(sig *driver.LossSignal) {
	q.mu.Lock()
	if q.ended {
		q.mu.Unlock()
		sig.Unwatch()
		return
	}
	q.holding++
	q.nodes = append(q.nodes, sig)
	q.mu.Unlock()
	sig.Watch(nodeLoss{q: q, sig: sig})
}

// Forget implements driver.Forgetter: the lease ended; the nodes' signals go.
func (q *quorumLoss) Forget(*driver.LossSignal) {
	q.mu.Lock()
	q.ended = true
	nodes := q.nodes
	q.mu.Unlock()
	for _, sig := range nodes {
		sig.Unwatch()
	}
}

// nodeLoss is the watcher of one node's signal.
type nodeLoss struct {
	q   *quorumLoss
	sig *driver.LossSignal
}

func (n nodeLoss) Lost() {
	q := n.q
	q.mu.Lock()
	q.holding--
	left := q.holding
	q.mu.Unlock()
	if left < q.quorum {
		q.Lose(fmt.Errorf("redlock: %d of the masters that granted the lock still hold it, fewer than the quorum of %d (the last to go: %w)", left, q.quorum, n.sig.Cause()))
	}
}
