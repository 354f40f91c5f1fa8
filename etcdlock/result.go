package etcdlock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/driver"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// dlock.Once keeps its result beside the lock, under ResultKey, attached to a
// lease of its own that ends it after its TTL (in whole seconds, rounded up,
// and at least the server's minimum lease TTL).

// ResultKey returns the etcd key of the result dlock.Once keeps for the lock
// named key. It lies outside every queue.
func ResultKey(key string) string { return Prefix + "result/{" + key + "}" }

// maxResult is the largest result a Driver keeps: below etcd's default limit
// of a request's size (1.5 MiB), with room for the rest of the request.
const maxResult = 1<<20 + 1 // Once keeps 1 MiB values, with its byte that tells a value from a shared error

var _ driver.ResultKeeper = (*Driver)(nil)

// PutResult implements driver.ResultKeeper: a lease for the result's TTL, and
// one transaction that writes the result only while h's entry is the one its
// grant created (a force-unlock or an expiry deleted it otherwise).
func (d *Driver) PutResult(ctx context.Context, hd driver.Holding, value []byte, ttl time.Duration) error {
	if len(value) > maxResult {
		return fmt.Errorf("%w: etcdlock: a result of %d bytes, more than %d", driver.ErrInvalid, len(value), maxResult)
	}
	ctx, done := d.request(ctx)
	return done(d.putResult(ctx, hd, value, ttl))
}

func (d *Driver) putResult(ctx context.Context, hd driver.Holding, value []byte, ttl time.Duration) error {
	h, err := d.entryOf(ctx, hd)
	if err != nil {
		return err
	}
	lease, _, err := d.grantLease(ctx, int64((ttl+time.Second-1)/time.Second))
	if err != nil {
		return err
	}
	resp, err := d.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(h.entry), "=", h.revision())).
		Then(clientv3.OpPut(ResultKey(hd.Key), string(value), clientv3.WithLease(lease))).
		Commit()
	if err == nil && resp.Succeeded {
		return nil
	}
	// The lease carries nothing: let it go (it ends at its TTL otherwise).
	rctx, cancel := driver.CleanupContext(ctx)
	defer cancel()
	_, _ = d.cli.Revoke(rctx, lease)
	if err != nil {
		return mapErr(err)
	}
	return notHeld(hd.Key)
}

// GetResult implements driver.ResultKeeper.
func (d *Driver) GetResult(ctx context.Context, key string) ([]byte, bool, error) {
	ctx, done := d.request(ctx)
	resp, err := d.cli.Get(ctx, ResultKey(key))
	if err = done(mapErr(err)); err != nil {
		return nil, false, err
	}
	if len(resp.Kvs) == 0 {
		return nil, false, nil
	}
	return resp.Kvs[0].Value, true, nil
}

// MaxResult implements driver.ResultKeeper.
func (d *Driver) MaxResult() int { return maxResult }
