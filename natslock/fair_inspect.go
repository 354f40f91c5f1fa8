package natslock

import (
	"context"
	"strings"

	"github.com/dlock-go/dlock/driver"
	"github.com/nats-io/nats.go/jetstream"
)

// Inspect implements driver.Inspector: the key's queue as the bucket holds
// it now (a listing of its entries, and a read of each): the holder is the
// entry at its head (Owner and Token are its), the others are its waiters.
func (f *FairDriver) Inspect(ctx context.Context, key string) (driver.LockInfo, error) {
	return f.drv().Inspect(ctx, key)
}

// ListPrefix implements driver.Inspector: the held locks whose keys start
// with prefix, each read as Inspect reads it. Keys whose queues hold foreign
// data are left out.
func (f *FairDriver) ListPrefix(ctx context.Context, prefix string) ([]driver.LockInfo, error) {
	return f.drv().ListPrefix(ctx, prefix)
}

// ForceUnlock implements driver.Inspector: the entry at the head of the
// key's queue replaced by a marker, only if it is still the holding it read.
// The holder's Driver sees it in its watch of the queue and loses the lease
// at once; the next entry holds the lock.
func (f *FairDriver) ForceUnlock(ctx context.Context, key string) (driver.LockInfo, error) {
	return f.drv().ForceUnlock(ctx, key)
}

// inspectQueue reads key's queue into a LockInfo, and returns the head's
// entry too (nil when the queue is empty).
func (d *Driver) inspectQueue(ctx context.Context, b *bucket, key string) (driver.LockInfo, *jetstream.RawStreamMsg, error) {
	info := driver.LockInfo{Key: key}
	live, err := d.readQueue(ctx, b, key)
	if err != nil || len(live) == 0 {
		return info, nil, err
	}
	head := live[0]
	for _, q := range live[1:] {
		if q.rec.Token < head.rec.Token {
			head = q
		}
	}
	n := max(head.rec.Permits, 1)
	info.Held, info.Holders, info.Limit, info.Kind = true, min(len(live), n), n, d.kind
	info.Owner, info.Token, info.LastToken, info.Metadata, info.TTL = head.rec.Owner, head.rec.Token, head.rec.Token, head.rec.Meta, remaining(head.m)
	info.Waiters = len(live) - info.Holders
	return info, head.m, nil
}

// queued is a live entry of a key's queue as the bucket holds it.
type queued struct {
	id  string
	rec record // its Token set (the first message's own revision)
	m   *jetstream.RawStreamMsg
}

// readQueue reads the live entries of key's queue: a listing of its
// entries, and a read of each.
func (d *Driver) readQueue(ctx context.Context, b *bucket, key string) ([]queued, error) {
	rctx, cancel := d.requestCtx(ctx)
	defer cancel()
	lister, err := b.kv.ListKeysFiltered(rctx, key+".*")
	if err != nil {
		return nil, d.mapErr(ctx, "list", err)
	}
	var subs []string
	for k := range lister.Keys() {
		subs = append(subs, k)
	}
	_ = lister.Stop()
	if err := rctx.Err(); err != nil {
		return nil, d.mapErr(ctx, "list", err)
	}
	var live []queued
	for _, sub := range subs {
		m, err := d.lastMsg(ctx, b, d.pre+sub)
		if err != nil {
			return nil, err
		}
		if m == nil || marker(m) {
			continue
		}
		rec, err := decode(m)
		if err != nil {
			return nil, err
		}
		if rec.Token == 0 {
			rec.Token = m.Sequence
		}
		live = append(live, queued{id: strings.TrimPrefix(sub, key+"."), rec: rec, m: m})
	}
	return live, nil
}
