package etcdlock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Subscribe implements dlock.Notifier. It wakes the waiter whose queue entry is h.Handle when it should make
// another attempt: when the entry just older than its own (its predecessor) is
// deleted and no older one is left, or at once when it has no predecessor. It
// watches one key at a time, the current predecessor, so a release wakes one
// waiter. A watch that breaks (its member lost the leader, its connection
// failed for good) is set up again from a fresh read of the queue, so a
// deletion during the break is not missed. The wake channel
// has capacity 1; cancel stops the watch and must be called exactly once.
func (d *Driver) Subscribe(ctx context.Context, hd dlock.Holding) (<-chan struct{}, func(), error) {
	h, err := handleOf(hd.Handle)
	if err != nil {
		return nil, nil, err
	}
	if h == nil {
		return nil, nil, fmt.Errorf("%w: Subscribe needs a waiter's queue entry", dlock.ErrInvalid)
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
	for ctx.Err() == nil {
		rev, moved := h.watchState()
		gctx, cancel := context.WithTimeout(ctx, d.timeout)
		resp, err := d.cli.Get(gctx, qp, append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(rev-1))...)
		cancel()
		if err != nil {
			backoff()
			continue
		}
		if len(resp.Kvs) == 0 {
			// Nobody ahead: the waiter's next attempt takes the lock.
			notify()
			select {
			case <-ctx.Done():
			case <-moved:
			}
			continue
		}
		// When the predecessor goes, read the queue again: the waiter is woken
		// only if nobody older is left.
		if d.awaitDelete(ctx, string(resp.Kvs[0].Key), resp.Header.Revision+1, moved) == broken {
			backoff()
		} else {
			pause = minPause
		}
	}
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
