package zklock

import (
	"context"
	"sync"
	"time"
)

// sweepRetry is how long the sweeper waits before trying again entries that
// failed, when no reconnect comes first.
const sweepRetry = time.Second

// sweepEntry is a node (name set) or every node of an owner (name empty) under a
// lock node, left behind by a call whose outcome is unknown: a create whose
// reply was lost, a delete that did not get through.
type sweepEntry struct {
	lockPath, owner, name string
}

// sweeper holds the nodes to delete as soon as the session is connected again,
// so that a lost reply leaves no node holding or queueing for the rest of the
// session (ZOOKEEPER-1262).
type sweeper struct {
	busy sync.Mutex // held while an entry is being swept, so that forget waits for it

	mu      sync.Mutex
	pending map[sweepEntry]struct{}
	poke    chan struct{}
}

func (s *sweeper) init() {
	s.pending = map[sweepEntry]struct{}{}
	s.poke = make(chan struct{}, 1)
}

func (s *sweeper) add(e sweepEntry) {
	s.mu.Lock()
	s.pending[e] = struct{}{}
	s.mu.Unlock()
	select {
	case s.poke <- struct{}{}:
	default:
	}
}

// forget drops the entries of owner under lp: a new attempt of the same owner
// takes its nodes over. It waits for a sweep in progress.
func (s *sweeper) forget(lp, owner string) {
	s.busy.Lock()
	defer s.busy.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	for e := range s.pending {
		if e.lockPath == lp && e.owner == owner {
			delete(s.pending, e)
		}
	}
}

func (s *sweeper) entries() []sweepEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	es := make([]sweepEntry, 0, len(s.pending))
	for e := range s.pending {
		es = append(es, e)
	}
	return es
}

// sweepLoop deletes pending nodes when an entry is added, when the session is
// (re)connected, and every sweepRetry while entries remain, until Close.
func (d *Driver) sweepLoop() {
	defer d.wg.Done()
	retry := time.NewTimer(sweepRetry)
	defer retry.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-d.sweep.poke:
		case <-d.session:
		case <-retry.C:
		}
		left := false
		for _, e := range d.sweep.entries() {
			if !d.sweepOne(e) {
				left = true
			}
		}
		if left {
			retry.Reset(sweepRetry)
		}
	}
}

// sweepOne deletes the nodes of e, and reports whether the entry is done with.
func (d *Driver) sweepOne(e sweepEntry) bool {
	d.sweep.busy.Lock()
	defer d.sweep.busy.Unlock()
	d.sweep.mu.Lock()
	_, ok := d.sweep.pending[e]
	d.sweep.mu.Unlock()
	if !ok {
		return true // forgotten: a new attempt took the owner over
	}
	ctx, cancel := context.WithTimeout(context.Background(), d.SessionTimeout())
	defer cancel()
	go func() {
		select {
		case <-d.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := d.awaitOwner(ctx, e.lockPath, e.owner); err != nil {
		return false
	}
	q, err := d.list(ctx, e.lockPath)
	if err != nil {
		return false
	}
	for _, c := range q {
		if c.owner == e.owner && (e.name == "" || c.name == e.name) {
			err := d.ownerCall(ctx, e.lockPath, e.owner, func() error { return d.conn.Delete(e.lockPath+"/"+c.name, -1) })
			if err != nil && !isNoNode(err) {
				return false
			}
		}
	}
	d.sweep.mu.Lock()
	delete(d.sweep.pending, e)
	d.sweep.mu.Unlock()
	return true
}
