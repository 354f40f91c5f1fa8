package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/dlock-go/dlock/driver"
)

// Subscribe implements driver.Notifier: the waiter subscribes on every node, and
// a wake from any node wakes it. It fails only when no node could subscribe; the
// channel closes when every node's notifications have stopped.
func (d *Driver) Subscribe(ctx context.Context, h driver.Holding) (<-chan struct{}, func(), error) {
	nh := h
	nh.Handle = nil
	var (
		chans   []<-chan struct{}
		cancels []func()
		errs    []error
	)
	for i, nd := range d.nodes {
		ch, cancel, err := nd.Subscribe(ctx, nh)
		if err != nil {
			errs = append(errs, &NodeError{Node: i, Err: err})
			continue
		}
		chans, cancels = append(chans, ch), append(cancels, cancel)
	}
	if w, ok := h.Handle.(*waits); ok {
		w.end() // the nodes' registrations of the waiter now last as its subscriptions do
	}
	if len(chans) == 0 {
		return nil, nil, fmt.Errorf("redlock: no node could subscribe: %w", errors.Join(errs...))
	}
	wake := make(chan struct{}, 1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var open atomic.Int32
	open.Store(int32(len(chans)))
	for _, ch := range chans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case _, ok := <-ch:
					if !ok {
						if open.Add(-1) == 0 {
							close(wake) // every node's notifications stopped: poll
						}
						return
					}
					select {
					case wake <- struct{}{}:
					default:
					}
				}
			}
		}()
	}
	var once sync.Once
	return wake, func() {
		once.Do(func() {
			close(stop)
			wg.Wait()
			for _, c := range cancels {
				c()
			}
		})
	}, nil
}
