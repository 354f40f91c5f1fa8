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
	mu      sync.Mutex
	pending map[sweepEntry]struct{}
	active  map[ownerKey]chan struct{} // owners being swept; closed when done
	poke    chan struct{}
}

func (s *sweeper) init() {
	s.pending = map[sweepEntry]struct{}{}
	s.active = map[ownerKey]chan struct{}{}
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
// takes its nodes over. It reports whether there were any (an earlier call's
// outcome is unknown). It waits for a sweep of the owner in progress, or for
// ctx's end.
func (s *sweeper) forget(ctx context.Context, lp, owner string) (bool, error) {
	k := ownerKey{lp, owner}
	found := false
	for {
		s.mu.Lock()
		busy := s.active[k]
		if busy == nil {
			for e := range s.pending {
				if e.lockPath == lp && e.owner == owner {
					delete(s.pending, e)
					found = true
				}
			}
			s.mu.Unlock()
			return found, nil
		}
		s.mu.Unlock()
		select {
		case <-busy:
			found = true // the sweep may have left some of the owner's nodes
		case <-ctx.Done():
			return false, ctx.Err()
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
	k := ownerKey{e.lockPath, e.owner}
	s := &d.sweep
	s.mu.Lock()
	_, pending := s.pending[e]
	if !pending || s.active[k] != nil {
		s.mu.Unlock()
		return !pending // forgotten: a new attempt took the owner over
	}
	busy := make(chan struct{})
	s.active[k] = busy
	s.mu.Unlock()
	ok := d.sweepNodes(e)
	s.mu.Lock()
	delete(s.active, k)
	close(busy)
	if ok {
		delete(s.pending, e)
	}
	s.mu.Unlock()
	return ok
}

// sweepNodes deletes the nodes of e once the owner's requests in flight have
// been answered, within a session timeout.
func (d *Driver) sweepNodes(e sweepEntry) bool {
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
	return true
}
