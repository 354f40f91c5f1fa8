package redlock

import (
	"fmt"
	"slices"
	"sync"

	"github.com/dlock-go/dlock/driver"
)

// Told at once: each node's driver tells of its holding's loss (a
// force-unlock on that master, or its keyspace notifications; see redislock),
// and the lease is lost at once when the masters that still hold it fall below
// the quorum. The rest (a master that restarted empty, an expiry) is found by
// the renewals, as before. A master whose attempt was still on its way when
// the majority granted counts as holding until it answers otherwise, so that a
// lock granted by all but known to a majority is not lost when one master of
// that majority goes.

// nodeSignals collects the loss signals of one acquisition's node grants:
// those of the granting majority and of the attempts still on their way end up
// watched by a quorumLoss, every other one (a failed acquisition's) is let go
// at once.
type nodeSignals struct {
	mu       sync.Mutex
	answered map[int]answer // before settle
	closed   bool
	q        *quorumLoss  // the holding's, once settled with one
	awaited  map[int]bool // after settle: nodes counted as holding until they answer
}

// answer is a node's answer to an acquisition.
type answer struct {
	granted bool
	sig     *driver.LossSignal // the grant's, if its driver pushes losses
}

// take removes node i's signal from g, keeping it until settled.
func (s *nodeSignals) take(i int, g *driver.Grant) {
	a := answer{granted: g.Token != 0}
	a.sig, _ = g.Lost.(*driver.LossSignal)
	g.Lost = nil
	s.mu.Lock()
	if !s.closed {
		if s.answered == nil {
			s.answered = map[int]answer{}
		}
		s.answered[i] = a
		s.mu.Unlock()
		return
	}
	q, counted := s.q, s.awaited[i]
	delete(s.awaited, i)
	s.mu.Unlock()
	switch {
	case q == nil:
		if a.sig != nil {
			a.sig.Unwatch()
		}
	case a.granted && a.sig != nil:
		q.add(a.sig, !counted) // a straggler that granted after the majority: it holds too
	case a.granted:
		// It holds, with no signal of its own: it counts as it did.
	default:
		if a.sig != nil {
			a.sig.Unwatch()
		}
		if counted {
			q.gone(fmt.Errorf("redlock: node %d did not grant the lock after the majority did", i))
		}
	}
}

// settle ends the collection: the signals of granted and of the nodes of
// pending (the attempts on their way when the majority granted) that granted
// go to the returned Grant.Lost (nil when granted is nil: a failed
// acquisition), and the others are let go. A pending node that has not
// answered yet counts as holding until it does.
func (s *nodeSignals) settle(granted, pending []int, quorum int) *driver.LossSignal {
	var q *quorumLoss
	if len(granted) > 0 {
		q = &quorumLoss{quorum: quorum}
		q.Forgetter = q
	}
	s.mu.Lock()
	s.closed = true
	s.q = q
	answered := s.answered
	s.answered = nil
	var mine []*driver.LossSignal
	if q != nil {
		for _, i := range slices.Concat(granted, pending) {
			a, ok := answered[i]
			switch {
			case !ok:
				if s.awaited == nil {
					s.awaited = map[int]bool{}
				}
				s.awaited[i] = true
				q.holding++
			case a.granted:
				if a.sig != nil {
					mine = append(mine, a.sig)
				}
				delete(answered, i)
				q.holding++
			}
		}
	}
	s.mu.Unlock()
	for _, a := range answered {
		if a.sig != nil {
			a.sig.Unwatch()
		}
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
// quorum of the masters that granted it (or may still) still hold it.
type quorumLoss struct {
	driver.LossSignal
	nodes   []*driver.LossSignal
	quorum  int
	mu      sync.Mutex
	holding int  // the masters that granted it (or may still) and have not said it is gone
	ended   bool // forgotten: the lease ended
}

// add watches the signal of a master that granted the holding after the
// majority did, counting it unless it was counted while on its way.
func (q *quorumLoss) add(sig *driver.LossSignal, count bool) {
	q.mu.Lock()
	if q.ended {
		q.mu.Unlock()
		sig.Unwatch()
		return
	}
	if count {
		q.holding++
	}
	q.nodes = append(q.nodes, sig)
	q.mu.Unlock()
	sig.Watch(nodeLoss{q: q, sig: sig})
}

// gone counts a master that no longer holds the holding (or never did), and
// loses the holding if fewer than the quorum are left.
func (q *quorumLoss) gone(cause error) {
	q.mu.Lock()
	if q.ended {
		q.mu.Unlock()
		return
	}
	q.holding--
	left := q.holding
	q.mu.Unlock()
	if left < q.quorum {
		q.Lose(fmt.Errorf("redlock: %d of the masters that granted the lock still hold it, fewer than the quorum of %d (the last to go: %w)", left, q.quorum, cause))
	}
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

func (n nodeLoss) Lost() { n.q.gone(n.sig.Cause()) }
