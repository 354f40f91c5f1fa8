package etcdlock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/driver"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Subscribe implements driver.Notifier. It wakes the waiter whose queue entry
// is h.Handle when it should make another attempt: when the entry just older
// than its own (its predecessor) is deleted, or at once when it has no
// predecessor. It watches one key at a time, the current predecessor, so a
// release wakes one waiter. The predecessor is the one the waiter's last
// attempt read in its own transaction, and the attempt after a wake reads who
// is first and, if not the waiter, its new predecessor, in the same way:
// entries leave a queue in order unless a waiter gives up, so a waiter woken is
// all but always the first, and the wake costs no read of its own. A waiter
// ahead that gives up wakes the one behind it, whose attempt then finds the
// lock still held. A watch that breaks (its member lost the leader, its
// connection failed for good) is set up again from a fresh read of the queue,
// so a deletion during the break is not missed. The wake channel has capacity
// 1; cancel stops the watch and must be called exactly once.
func (d *Driver) Subscribe(ctx context.Context, hd driver.Holding) (<-chan struct{}, func(), error) {
	h, err := handleOf(hd.Handle)
	if err != nil {
		return nil, nil, err
	}
	if h == nil {
		return nil, nil, fmt.Errorf("%w: Subscribe needs a waiter's queue entry", driver.ErrInvalid)
	}
	wake := make(chan struct{}, 1)
	done := make(chan struct{})
	wctx, cancel := context.WithCancel(ctx)
	go func() {
		defer close(done)
		d.watchPredecessors(wctx, QueuePrefix(hd.Key), h, wake)
	}()
	return wake, func() { cancel(); <-done }, nil
}

// minPause and maxPause bound the pause of a subscription after a failed read or
// watch.
const minPause, maxPause = 10 * time.Millisecond, time.Second

func (d *Driver) watchPredecessors(ctx context.Context, qp string, h *queueEntry, wake chan<- struct{}) {
	notify := func() {
		d.wakes.Add(1)
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	// After a failure (no leader, lost connection) wait a little before the next
	// read: a growing pause, reset when a watch ends normally.
	pause := minPause
	backoff := func() {
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
		pause = min(2*pause, maxPause)
	}
	// cur is the predecessor watched: the one the waiter's last attempt read
	// (seen), or the one the subscription read itself; nil when unknown.
	var cur, seen *predecessor
	for ctx.Err() == nil {
		rev, ahead, moved := h.watchState()
		if ahead != seen {
			seen, cur = ahead, ahead
		}
		if cur == nil {
			p, err := d.readAhead(ctx, qp, rev)
			if err != nil {
				backoff()
				continue
			}
			cur = p
		}
		if cur.key == "" || cur.gone {
			// Nobody ahead: the waiter's next attempt takes the lock, and tells
			// what it read (moved).
			notify()
			select {
			case <-ctx.Done():
			case <-moved:
			}
			continue
		}
		switch d.awaitDelete(ctx, cur.key, cur.rev+1, moved) {
		case deleted:
			// Entries leave the queue in order unless a waiter gives up: the
			// waiter is most likely first now. Its next attempt tells, and
			// reads the next predecessor if not (moved).
			pause = minPause
			cur = &predecessor{gone: true}
		case broken:
			cur = nil
			backoff()
		case stopped:
		}
	}
}

// readAhead reads the entry of the queue qp just older than the revision rev.
func (d *Driver) readAhead(ctx context.Context, qp string, rev int64) (*predecessor, error) {
	gctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	resp, err := d.cli.Get(gctx, qp, append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(rev-1), clientv3.WithKeysOnly())...)
	if err != nil {
		return nil, err
	}
	return ahead(resp.Header.Revision, resp.Kvs), nil
}

// ahead is the predecessor read at revision rev: the first of older (the
// entries older than the waiter's, newest first; at most one needed).
func ahead(rev int64, older []*mvccpb.KeyValue) *predecessor {
	p := &predecessor{rev: rev}
	if len(older) > 0 {
		p.key = string(older[0].Key)
	}
	return p
}

// watchEnd is how a watch of a predecessor ended.
type watchEnd int

const (
	deleted watchEnd = iota // the predecessor was deleted
	stopped                 // the subscription ended or the waiter's entry moved
	broken                  // the watch failed (no leader, lost connection)
)

// awaitDelete watches key from revision rev on until it is deleted, the
// subscription ends, the waiter's entry moves, or the watch breaks; the caller
// then reads the queue again.
func (d *Driver) awaitDelete(ctx context.Context, key string, rev int64, moved <-chan struct{}) watchEnd {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := d.cli.Watch(wctx, key, clientv3.WithRev(rev), clientv3.WithFilterPut())
	for {
		select {
		case <-ctx.Done():
			return stopped
		case <-moved:
			return stopped
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				return broken
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					return deleted
				}
			}
		}
	}
}
