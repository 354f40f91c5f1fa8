package natslock

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/dlock-go/dlock/driver"
	"github.com/nats-io/nats.go/jetstream"
)

// Inspect implements driver.Inspector: the key's last message as the bucket
// holds it now. Waiters wait in their own processes, unseen
// (driver.WaitersUnknown); LastToken is the holder's token while held, 0
// when free.
func (d *Driver) Inspect(ctx context.Context, key string) (driver.LockInfo, error) {
	b, err := d.open(ctx, key)
	if err != nil {
		return driver.LockInfo{}, err
	}
	info, _, err := d.inspect(ctx, b, key)
	return info, err
}

// inspect reads key's last message into a LockInfo, and returns the message
// too (nil when the key has none).
func (d *Driver) inspect(ctx context.Context, b *bucket, key string) (driver.LockInfo, *jetstream.RawStreamMsg, error) {
	if d.fair {
		return d.inspectQueue(ctx, b, key)
	}
	info := driver.LockInfo{Key: key, Waiters: driver.WaitersUnknown}
	m, err := d.lastMsg(ctx, b, d.pre+key)
	if err != nil || m == nil || marker(m) {
		return info, m, err
	}
	rec, err := decode(m)
	if err != nil {
		return info, m, err
	}
	token := rec.Token
	if token == 0 {
		token = m.Sequence
	}
	info.Held, info.Holders, info.Limit, info.Kind = true, 1, 1, driver.KindMutex
	info.Owner, info.Token, info.LastToken, info.Metadata, info.TTL = rec.Owner, token, token, rec.Meta, remaining(m)
	return info, m, nil
}

// ListPrefix implements driver.Inspector: the bucket's keys that start with
// prefix, each read as Inspect reads it (one request per key). Keys that
// hold foreign data are left out.
func (d *Driver) ListPrefix(ctx context.Context, prefix string) ([]driver.LockInfo, error) {
	pick := func(k string) (string, bool) { return k, strings.HasPrefix(k, prefix) }
	if d != nil && d.fair {
		pick = func(k string) (string, bool) { // an entry of the queue of k up to its last '.'
			i := strings.LastIndexByte(k, '.')
			return k[:max(i, 0)], i > 0 && strings.HasPrefix(k[:i], prefix)
		}
	}
	b, keys, err := d.listKeys(ctx, pick)
	if err != nil {
		return nil, err
	}
	out := make([]driver.LockInfo, 0, len(keys))
	for _, k := range keys {
		info, _, err := d.inspect(ctx, b, k)
		if errors.Is(err, driver.ErrConflict) || d.fair && err == nil && !info.Held {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, info)
	}
	return out, nil
}

// listKeys lists the bucket's keys and returns the lock keys that pick
// makes of them (each once, in the order first seen).
func (d *Driver) listKeys(ctx context.Context, pick func(key string) (string, bool)) (*bucket, []string, error) {
	if d == nil {
		return nil, nil, errNilDriver
	}
	if ctx == nil {
		return nil, nil, fmt.Errorf("%w: natslock: nil context", driver.ErrInvalid)
	}
	b, err := d.openBucket(ctx)
	if err != nil {
		return nil, nil, err
	}
	rctx, cancel := d.requestCtx(ctx)
	defer cancel()
	lister, err := b.kv.ListKeys(rctx)
	if err != nil {
		return nil, nil, d.mapErr(ctx, "list", err)
	}
	seen := map[string]bool{}
	var keys []string
	for k := range lister.Keys() {
		if key, ok := pick(k); ok && !seen[key] {
			seen[key] = true
			keys = append(keys, key)
		}
	}
	_ = lister.Stop()
	if err := rctx.Err(); err != nil {
		return nil, nil, d.mapErr(ctx, "list", err)
	}
	return b, keys, nil
}

// ForceUnlock implements driver.Inspector: a delete marker of the key, only
// if its last message is still the holding it read. The holder's Driver
// sees the marker in its watch of the key and loses the lease at once.
func (d *Driver) ForceUnlock(ctx context.Context, key string) (driver.LockInfo, error) {
	b, err := d.open(ctx, key)
	if err != nil {
		return driver.LockInfo{}, err
	}
	for range 3 {
		info, m, err := d.inspect(ctx, b, key)
		if err != nil {
			return info, err
		}
		if !info.Held {
			return info, fmt.Errorf("%w: natslock: %q is free", driver.ErrNotHeld, key)
		}
		if d.fair {
			err = d.purgeAt(ctx, strings.TrimPrefix(m.Subject, d.pre), m.Sequence, releasedTTL)
		} else {
			_, err = d.del(ctx, key, m.Sequence, false)
		}
		if err == nil {
			return info, nil
		}
		if !wrongLast(err) {
			return info, d.mapErr(ctx, "force unlock", err)
		}
		// Renewed or released meanwhile: read it again.
	}
	return driver.LockInfo{Key: key, Waiters: driver.WaitersUnknown}, errors.Join(driver.ErrUnavailable, fmt.Errorf("natslock: %q changed at every attempt to force it", key))
}
