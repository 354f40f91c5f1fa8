package legacy

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// NewBridge returns the dlock.Locker of a fleet moving off the legacy protocol, a
// Bridge, locking through rdb, with the legacy key in format f and opts as the
// defaults of every TryLock and Lock. Each of its leases holds two locks for one
// name: dlock's own Redis lock (package redislock, key redislock.LockKey(name))
// and the fleet's legacy key in the fleet's Format. Old clients see the legacy key held; redislock clients see the
// redislock key held; so a Bridge excludes both, while old clients and plain
// redislock clients do not exclude each other. The migration therefore runs in
// two phases:
//
//  1. Replace every dlock locker that shares the lock with old clients (legacy.New,
//     or hand-written SETNX code) by a Bridge, and keep old clients as they are.
//  2. Once no old client takes the lock any more (Driver.ForeignHolds stays zero,
//     the old services are retired or moved to dlock), replace the Bridges by
//     redislock.New, one process at a time: Bridges and redislock clients exclude
//     each other on the redislock key throughout.
//
// A Bridge takes the redislock key first and the legacy key second, and on
// failure of the second releases the first; it releases in the reverse order.
// Two Bridges therefore never hold one half each, and the legacy key only ever
// sees one Bridge at a time. The two keys are taken in two round trips, not one
// script, because they need not share a Redis Cluster slot: the legacy key's name
// is fixed by the old clients.
//
// Fencing tokens are the redislock key's: they keep increasing when the fleet
// moves on to plain redislock in phase 2. Waiters poll with the retry strategy
// (old clients do not publish their releases).
//
// It returns an error matching dlock.ErrInvalid for a nil client, a bad Format
// or a bad option; it does no I/O. The Bridge's driver is
// Client.Driver().(*BridgeDriver).
func NewBridge(rdb redis.UniversalClient, f Format, opts ...dlock.Option) (*dlock.Client, error) {
	d, err := NewBridgeDriver(rdb, f)
	if err != nil {
		return nil, err
	}
	return dlock.NewClient(d, opts...)
}

// BridgeDriver is the driver.Driver of a Bridge (see NewBridge). Most users want
// NewBridge.
type BridgeDriver struct {
	safe   *redislock.Driver
	legacy *Driver
}

// NewBridgeDriver returns the driver of a Bridge over rdb with the legacy key in
// format f.
func NewBridgeDriver(rdb redis.UniversalClient, f Format) (*BridgeDriver, error) {
	l, err := NewDriver(rdb, f)
	if err != nil {
		return nil, err
	}
	s, err := redislock.NewDriver(rdb)
	if err != nil {
		return nil, err
	}
	return &BridgeDriver{safe: s, legacy: l}, nil
}

// Legacy returns the driver of the legacy half (for LockKey and ForeignHolds).
func (b *BridgeDriver) Legacy() *Driver { return b.legacy }

// Acquire implements driver.Driver: the redislock key, then the legacy key.
func (b *BridgeDriver) Acquire(ctx context.Context, r driver.AcquireRequest) (driver.Grant, error) {
	r.Waiting = false // waiters poll; no wake-up marks on the redislock key
	g, err := b.safe.Acquire(ctx, r)
	if err != nil {
		return g, err
	}
	if _, err := b.legacy.Acquire(ctx, r); err != nil {
		cctx, cancel := driver.CleanupContext(ctx)
		defer cancel()
		_ = b.safe.Release(cctx, driver.Holding{Key: r.Key, Owner: r.Owner, TTL: r.TTL})
		return driver.Grant{}, err
	}
	return g, nil
}

// Info implements driver.Driver: a Bridge is a mutex of the legacy backend.
func (b *BridgeDriver) Info() driver.DriverInfo {
	return driver.DriverInfo{Backend: "legacy", Kind: driver.KindMutex}
}

// Extend implements driver.Driver: both halves, at the same time (a renewal has
// to fit in what is left of the lease). Losing either loses the lease.
func (b *BridgeDriver) Extend(ctx context.Context, h driver.Holding, ttl time.Duration) (time.Duration, error) {
	safe := make(chan error, 1)
	go func() {
		_, err := b.safe.Extend(ctx, h, ttl)
		safe <- err
	}()
	_, err := b.legacy.Extend(ctx, h, ttl)
	return ttl, errors.Join(<-safe, err)
}

// Release implements driver.Driver: the legacy key, then the redislock key; each
// only if this owner still holds it. The error matches dlock.ErrNotHeld when
// either half was no longer held.
func (b *BridgeDriver) Release(ctx context.Context, h driver.Holding) error {
	err := b.legacy.Release(ctx, h)
	return errors.Join(err, b.safe.Release(ctx, h))
}

// TTL implements driver.Driver: the shorter of the two halves' time left.
func (b *BridgeDriver) TTL(ctx context.Context, h driver.Holding) (time.Duration, error) {
	s, err := b.safe.TTL(ctx, h)
	if err != nil {
		return 0, err
	}
	l, err := b.legacy.TTL(ctx, h)
	if err != nil {
		return 0, err
	}
	return min(s, l), nil
}
