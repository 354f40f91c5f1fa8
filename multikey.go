package dlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/dlock-go/dlock/driver"
)

// maxGroupKeys is the largest number of distinct keys LockAll takes at once.
const maxGroupKeys = 1024

// Group holds several locks taken together by LockAll or TryLockAll: one Lease
// per key, with one loss signal for the whole group. The group ends when any of
// its leases ends (lost, or unlocked on its own) or when Unlock is called; a
// holder that needs every key must stop its work then. A Group is safe for
// concurrent use; the methods of a nil *Group report ErrNotHeld.
type Group struct {
	keys   []string // sorted, distinct
	leases []*Lease // leases[i] holds keys[i]
	stops  []func() bool
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	unlocked bool
}

// LockAll takes every key in keys, all or nothing, with locker's Lock and opts
// (WithWait bounds the whole call). Keys are taken in sorted order, so that
// callers asking for overlapping sets cannot deadlock each other; duplicates
// count once. When one key cannot be taken, the keys taken already are
// unlocked (on a detached, short context if ctx has ended) and the error is that
// key's Lock error. Each key keeps its own lease, watchdog and fencing token
// (Token); the group's Done, Context and Err report the first of them to end.
//
// It returns an error matching ErrInvalid, before any I/O, for a nil locker or
// context, an empty list, more than 1024 distinct keys, a bad key or a
// bad option.
func LockAll(ctx context.Context, locker Locker, keys []string, opts ...Option) (*Group, error) {
	return lockAll(ctx, locker, keys, opts, false)
}

// TryLockAll is LockAll with one attempt per key (TryLock): it fails at once,
// with the BusyError of the first key held by another owner, and releases what
// it took.
func TryLockAll(ctx context.Context, locker Locker, keys []string, opts ...Option) (*Group, error) {
	return lockAll(ctx, locker, keys, opts, true)
}

func lockAll(ctx context.Context, locker Locker, keys []string, opts []Option, try bool) (*Group, error) {
	if driver.IsNil(locker) {
		return nil, invalidf("nil locker")
	}
	if ctx == nil {
		return nil, invalidf("nil context")
	}
	if len(keys) == 0 {
		return nil, invalidf("no keys")
	}
	for _, k := range keys {
		if err := driver.ValidateKey(k); err != nil {
			return nil, err
		}
	}
	sorted := slices.Compact(slices.Sorted(slices.Values(keys)))
	if len(sorted) > maxGroupKeys {
		return nil, invalidf("%d keys exceed %d", len(sorted), maxGroupKeys)
	}
	cfg := defaultConfig()
	cfg.apply(opts)
	if cfg.err != nil {
		return nil, cfg.err
	}
	lock := locker.Lock
	if try {
		lock = locker.TryLock
	} else if cfg.waitSet && cfg.wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.wait)
		defer cancel()
	}
	g := &Group{keys: sorted, leases: make([]*Lease, 0, len(sorted))}
	taken := false
	defer func() {
		// A failed Lock, or one that panicked (its Observer's), leaves no
		// key of the group taken.
		if !taken {
			g.unlockTaken(ctx)
		}
	}()
	for _, k := range sorted {
		l, err := lock(ctx, k, opts...)
		if err != nil {
			return nil, err
		}
		g.leases = append(g.leases, l)
	}
	taken = true
	g.ctx, g.cancel = context.WithCancelCause(context.Background())
	for _, l := range g.leases {
		lctx := l.Context()
		g.stops = append(g.stops, context.AfterFunc(lctx, func() { g.cancel(context.Cause(lctx)) }))
	}
	return g, nil
}

// unlockTaken unlocks the leases taken so far, in reverse order (each Unlock
// releases on a detached, short context once ctx has ended).
func (g *Group) unlockTaken(ctx context.Context) error {
	var errs []error
	for i := len(g.leases) - 1; i >= 0; i-- {
		errs = append(errs, g.leases[i].Unlock(ctx))
	}
	return errors.Join(errs...)
}

// Keys returns the group's keys, sorted and distinct.
func (g *Group) Keys() []string {
	if g == nil {
		return nil
	}
	return slices.Clone(g.keys)
}

// Lease returns the lease of key, or nil when key is not in the group.
func (g *Group) Lease(key string) *Lease {
	if g == nil {
		return nil
	}
	if i, ok := slices.BinarySearch(g.keys, key); ok {
		return g.leases[i]
	}
	return nil
}

// Token returns the fencing token of key's lease, or 0 when key is not in the
// group. Pass each resource the token of its own key.
func (g *Group) Token(key string) uint64 { return g.Lease(key).Token() }

// Done returns a channel that is closed when the group ends: one of its leases
// was lost or unlocked, or Unlock was called.
func (g *Group) Done() <-chan struct{} {
	if g == nil {
		return closedCh
	}
	return g.ctx.Done()
}

// Context returns a context cancelled when the group ends, with the cause of
// the first lease to end (ErrLockLost, wrapped, when it was lost), or
// ErrReleased after Unlock.
func (g *Group) Context() context.Context {
	if g == nil {
		return (*Lease)(nil).Context()
	}
	return g.ctx
}

// Err returns nil while every lease of the group holds, and otherwise the
// group's end as Context's cause. Like Lease.Err, it checks the local
// deadlines itself.
func (g *Group) Err() error {
	if g == nil {
		return ErrNotHeld
	}
	for _, l := range g.leases {
		if err := l.Err(); err != nil {
			g.cancel(err)
			break
		}
	}
	if g.ctx.Err() == nil {
		return nil
	}
	return context.Cause(g.ctx)
}

// Unlock unlocks every lease of the group, in reverse order, and ends the
// group. Its error joins those of the leases' Unlock calls (ErrLockLost for a
// lease that was lost, ErrNotHeld for one unlocked already); a second Unlock
// returns ErrNotHeld without I/O. As Lease.Unlock, it still releases on a
// detached, short context when ctx has ended.
func (g *Group) Unlock(ctx context.Context) error {
	if g == nil {
		return ErrNotHeld
	}
	if ctx == nil {
		return invalidf("nil context")
	}
	g.mu.Lock()
	done := g.unlocked
	g.unlocked = true
	g.mu.Unlock()
	if done {
		return fmt.Errorf("%w: group already unlocked", ErrNotHeld)
	}
	for _, stop := range g.stops {
		stop()
	}
	g.cancel(ErrReleased)
	return g.unlockTaken(ctx)
}
