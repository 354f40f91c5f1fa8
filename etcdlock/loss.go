package etcdlock

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Told at once: while a Driver holds locks it keeps one watch (a watch stream
// of its own) on the deletions under Prefix, and a holder whose entry is
// deleted (a force-unlock, `dlock unlock --force`, any client's delete, the end
// of its lease) loses its Lease at once (dlock.LossStoreSignal) instead of at
// its next renewal. One watch per Driver, not one per holding: an uncontended
// lock and unlock costs no request more. It sees the deletions of every lock
// under Prefix (a message each, ignored unless the entry is one of the
// Driver's holdings), and lingers lossLinger after the last holding ends.
// The watch starts at the current revision; when it does (at first, and again
// after a compaction cut its history), the holdings registered until then are
// read once at that revision, so that a deletion made before the watch began
// is found too. After a break (its member lost the leader, the connection
// failed) it resumes at the revision after the last it saw, and misses
// nothing.

// lossLinger is how long the loss watch outlives the Driver's last holding.
const lossLinger = 10 * time.Second

// lossWatch is a Driver's watch of deleted holdings.
type lossWatch struct {
	mu     sync.Mutex
	holds  map[string]*queueEntry // by entry key
	cancel context.CancelFunc     // stops the watch; nil when none runs
	idle   *time.Timer
	ready  chan struct{} // closed once the running watch is created (for tests)
	start  func()        // called before a watch starts (for tests)
}

// hold watches the holding h for its deletion.
func (d *Driver) hold(h *queueEntry) {
	lw := &d.lw
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.holds == nil {
		lw.holds = map[string]*queueEntry{}
	}
	lw.holds[h.entry] = h
	if lw.idle != nil {
		lw.idle.Stop()
	}
	if lw.cancel != nil {
		return
	}
	ctx, cancel := context.WithCancel(d.cli.Ctx())
	lw.cancel = cancel
	lw.ready = make(chan struct{})
	go d.watchLosses(ctx, lw.ready, lw.start)
}

// forget stops watching the holding h.
func (d *Driver) forget(h *queueEntry) {
	lw := &d.lw
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.holds[h.entry] != h {
		return
	}
	delete(lw.holds, h.entry)
	if len(lw.holds) > 0 || lw.cancel == nil {
		return
	}
	if lw.idle == nil {
		lw.idle = time.AfterFunc(lossLinger, func() {
			lw.mu.Lock()
			defer lw.mu.Unlock()
			if len(lw.holds) == 0 && lw.cancel != nil {
				lw.cancel()
				lw.cancel = nil
			}
		})
		return
	}
	lw.idle.Reset(lossLinger)
}

// watchLosses watches the deletions under Prefix until ctx ends, and loses
// the holdings deleted. It starts at the current revision (a watch that starts
// in the past catches up in etcd's sweeps, a tenth of a second each) and
// checks the holdings registered before it (see checkHolds); after a break it
// resumes at the revision after the last it saw.
func (d *Driver) watchLosses(ctx context.Context, ready chan struct{}, start func()) {
	if start != nil {
		start()
	}
	w := clientv3.NewWatcher(d.cli)
	defer w.Close()
	pause := minPause
	var from int64
	for ctx.Err() == nil {
		opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithCreatedNotify()}
		fresh := from == 0
		if !fresh {
			opts = append(opts, clientv3.WithRev(from))
		}
		for resp := range w.Watch(clientv3.WithRequireLeader(ctx), Prefix+"{", opts...) {
			if resp.Err() != nil {
				if resp.CompactRevision > 0 {
					from = 0 // compacted: from now on
				}
				break
			}
			if resp.Created && fresh {
				d.checkHolds(ctx, resp.Header.Revision)
			}
			if resp.Created && ready != nil {
				close(ready)
				ready = nil
			}
			pause = minPause
			from = resp.Header.Revision + 1
			for _, ev := range resp.Events {
				d.deleted(string(ev.Kv.Key), ev.Kv.ModRevision)
			}
		}
		if ctx.Err() != nil {
			return
		}
		// Broken (no leader, lost connection): watch again from the next
		// revision, after a growing pause.
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
		pause = min(2*pause, maxPause)
	}
}

const (
	// checkHoldsBatch is how many entries checkHolds reads in one request.
	checkHoldsBatch = 64
	// lossCheckTimeout bounds checkHolds.
	lossCheckTimeout = 5 * time.Second
)

// checkHolds reads, at revision rev (where a watch starting after it begins),
// the entries of the holdings written at or before rev, and loses those whose
// entry is gone. A failed read loses nothing: the renewals find a loss then.
func (d *Driver) checkHolds(ctx context.Context, rev int64) {
	lw := &d.lw
	lw.mu.Lock()
	var hs []*queueEntry
	for _, h := range lw.holds {
		if h.revision() <= rev {
			hs = append(hs, h)
		}
	}
	lw.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, lossCheckTimeout)
	defer cancel()
	for len(hs) > 0 {
		batch := hs[:min(len(hs), checkHoldsBatch)]
		hs = hs[len(batch):]
		ops := make([]clientv3.Op, len(batch))
		for i, h := range batch {
			ops[i] = clientv3.OpGet(h.entry, clientv3.WithRev(rev), clientv3.WithKeysOnly())
		}
		resp, err := d.cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return
		}
		for i, r := range resp.Responses {
			kvs := r.GetResponseRange().GetKvs()
			if len(kvs) == 0 || kvs[0].CreateRevision != batch[i].revision() {
				d.lost(batch[i], fmt.Errorf("etcd: the lock's entry %s was gone at revision %d, when the Driver's loss watch began (force-unlocked, deleted by another client, or its lease ended)", batch[i].entry, rev))
			}
		}
	}
}

// deleted loses the holding whose entry key was deleted at revision rev.
func (d *Driver) deleted(key string, rev int64) {
	lw := &d.lw
	lw.mu.Lock()
	h := lw.holds[key]
	lw.mu.Unlock()
	if h != nil && rev > h.revision() {
		d.lost(h, fmt.Errorf("etcd: the lock's entry %s was deleted at revision %d (force-unlocked, deleted by another client, or its lease ended)", key, rev))
	}
}

// lost loses the holding h with cause, if it is still watched.
func (d *Driver) lost(h *queueEntry, cause error) {
	lw := &d.lw
	lw.mu.Lock()
	watched := lw.holds[h.entry] == h
	if watched {
		delete(lw.holds, h.entry)
	}
	lw.mu.Unlock()
	if watched && h.lose != nil {
		h.lose(cause)
	}
}
