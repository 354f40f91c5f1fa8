package etcdlock

import (
	"context"
	"fmt"

	"github.com/dlock-go/dlock/driver"

	clientv3 "go.etcd.io/etcd/client/v3"
)

var _ driver.KeyWatcher = (*Driver)(nil)

// WatchKey implements driver.KeyWatcher with an etcd watch on the entries of the
// lock named key: every entry created or deleted (an acquisition, a waiter
// queued, a release, an expired lease) sends a value. The channel is closed
// when ctx ends, and when the watch fails (no leader, the revision compacted,
// the connection closed). It costs one watch stream per call; the watch is
// cancelled when ctx ends.
func (d *Driver) WatchKey(ctx context.Context, key string) (<-chan struct{}, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", driver.ErrInvalid)
	}
	if err := driver.ValidateKey(key); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	wch := d.cli.Watch(wctx, QueuePrefix(key), clientv3.WithPrefix())
	out := make(chan struct{}, 1)
	go func() {
		defer close(out)
		defer cancel()
		for resp := range wch {
			if resp.Err() != nil || resp.Canceled {
				return
			}
			select {
			case out <- struct{}{}:
			default:
			}
		}
	}()
	return out, nil
}
