package zklock

import (
	"context"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// subscribe starts the watch of one waiter (see Subscribe).
func (d *Driver) subscribe(ctx context.Context, key, owner string) (<-chan struct{}, func(), error) {
	if err := d.checkArgs(key, owner); err != nil {
		return nil, nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	wake := make(chan struct{}, 1)
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.watchTurn(wctx, d.lockPath(key), owner, wake)
	}()
	var once sync.Once
	cancel := func() {
		once.Do(func() {
			stop()
			<-done
		})
	}
	return wake, cancel, nil
}

// watchTurn watches the node just before owner's in the queue at lp, and sends
// on wake when owner's node is first (or missing, or the state is unknown after
// an error), so that the waiter makes its next attempt. A deleted predecessor
// that was not the holder (a waiter that gave up) only moves the watch to the
// new predecessor: a release wakes exactly one waiter. It returns when ctx ends.
func (d *Driver) watchTurn(ctx context.Context, lp, owner string, wake chan<- struct{}) {
	notify := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	// idle waits for ctx's end, or for period to pass: the fallback re-check
	// when there is nothing to watch.
	idle := func(period time.Duration) bool {
		t := time.NewTimer(period)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	for ctx.Err() == nil {
		q, err := d.list(ctx, lp)
		if err != nil {
			notify()
			if !idle(sweepRetry) {
				return
			}
			continue
		}
		i := find(q, owner)
		if i <= 0 {
			// First (the lock is ours to take) or not queued (the node is gone
			// or was never made): the waiter's next attempt settles it.
			notify()
			if !idle(d.SessionTimeout()) {
				return
			}
			continue
		}
		pred := lp + "/" + q[i-1].name
		for {
			// A data watch (GetW) rather than an exists watch: it is set only
			// when the node exists, so a predecessor gone already leaves no
			// watch behind for a node that will never be created again.
			var ch <-chan zk.Event
			err := d.call(ctx, func() (err error) {
				_, _, ch, err = d.conn.GetW(pred)
				return err
			})
			if err != nil {
				if !isNoNode(err) && ctx.Err() == nil {
					notify()
					if !idle(sweepRetry) {
						return
					}
				}
				break // re-list
			}
			select {
			case <-ctx.Done():
				return
			case ev := <-ch:
				if ev.Type == zk.EventNodeDataChanged {
					continue // the predecessor renewed: watch it again
				}
				if ev.Type == zk.EventNotWatching {
					notify() // session expired or closing: let the waiter find out
				}
			}
			break
		}
	}
}
