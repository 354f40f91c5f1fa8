package natslock

import (
	"context"
	"sync"

	"github.com/dlock-go/dlock/driver"
)

// ExtendMany implements driver.BatchExtender: the renewals that are due
// together are published at once on the connection, and their replies
// awaited together, so that a hundred renewals cost about one round trip.
func (d *Driver) ExtendMany(ctx context.Context, reqs []driver.ExtendRequest) []driver.ExtendResult {
	out := make([]driver.ExtendResult, len(reqs))
	if len(reqs) == 1 {
		out[0].TTL, out[0].Err = d.Extend(ctx, reqs[0].Holding, reqs[0].TTL)
		return out
	}
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Go(func() {
			out[i].TTL, out[i].Err = d.Extend(ctx, r.Holding, r.TTL)
		})
	}
	wg.Wait()
	return out
}
