package zklock

import (
	"context"
	"errors"

	"github.com/dlock-go/dlock/driver"

	"github.com/go-zookeeper/zk"
)

var _ driver.KeyWatcher = (*Driver)(nil)

// WatchKey implements driver.KeyWatcher with ZooKeeper watches on the lock node
// of key: a child created or deleted (an acquisition, a waiter queued, a
// release, a session that expired) sends a value; while the lock node does not
// exist, its creation does. The channel is closed when ctx ends, and when a
// watch cannot be set (the session expired, the server unreachable for the
// request timeout). Each change costs one request to set the next watch.
func (d *Driver) WatchKey(ctx context.Context, key string) (<-chan struct{}, error) {
	if err := d.checkInspect(ctx, key); err != nil {
		return nil, err
	}
	lp := d.lockPath(key)
	out := make(chan struct{}, 1)
	ev, err := d.watchChildren(ctx, lp)
	if err != nil {
		return nil, err
	}
	go func() {
		defer close(out)
		for {
			select {
			case <-ctx.Done():
				return
			case e := <-ev:
				if e.Err != nil || e.Type == zk.EventNotWatching {
					return
				}
			}
			// The next watch is set before the caller is told, so that the
			// caller's read follows it and any change after that read fires
			// it: a watch set after the read could miss a node created
			// between the two (the lock node's creation and its first child
			// come in separate requests).
			ev, err = d.watchChildren(ctx, lp)
			select {
			case out <- struct{}{}:
			default:
			}
			if err != nil {
				return
			}
		}
	}()
	return out, nil
}

// watchChildren sets a watch on the children of lp, or on its creation while
// it does not exist, and returns the watch's event channel.
func (d *Driver) watchChildren(ctx context.Context, lp string) (<-chan zk.Event, error) {
	var ev <-chan zk.Event
	err := d.call(ctx, func() error {
		for range 3 { // the node may come and go between the two requests
			_, _, e, err := d.conn.ChildrenW(lp)
			if !errors.Is(err, zk.ErrNoNode) {
				ev = e
				return err
			}
			ok, _, e, err := d.conn.ExistsW(lp)
			if err != nil || !ok {
				ev = e
				return err
			}
		}
		return zk.ErrNoNode
	})
	if err != nil {
		return nil, mapErr(err)
	}
	return ev, nil
}
