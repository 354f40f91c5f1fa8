package redislock

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redisscript"
	"github.com/redis/go-redis/v9"
)

// NewReentrant returns a Client whose locks are reentrant: an acquisition made
// with the owner ID of the current holder (dlock.WithOwner) succeeds at once,
// while the lock is held, and adds a hold; each Lease's Unlock gives up that
// Lease's hold, and the lock is free once every hold is given up (or has
// expired). Another owner ID is refused exactly as by the plain mutex, and
// waits the same way (woken when the last hold is released).
//
// Owner IDs other than the holder's that wait take turns (see OwnerWaitMark):
// while one waits, the holder's new re-entries by Lock wait too, at most
// ReentryBar while the holder gives up no hold (a nested re-entry), so that
// holders sharing an owner ID cannot keep the lock forever by overlapping.
//
// Go has no thread identity, so ownership is explicit. Within a process, code
// that holds a Lease and needs the lock again passes an owner ID it shares with
// the outer acquisition; across processes, the processes that share an owner ID
// hold the lock together and keep each other out of nobody's way. Without
// WithOwner every acquisition is its own owner and the lock is a plain mutex.
//
// The holds of one holder share one Redis key, its fencing token (a re-entry
// gets the token of the holding it enters; tokens still increase from one
// holding to the next) and its expiry: acquiring or extending any hold never
// shortens the key's time, so a Lease's watchdog keeps the whole holding alive,
// and every Lease's local deadline stays within it. Each hold is recorded under
// its acquisition's random part (see driver.SplitOwner): a retried attempt whose
// earlier reply was lost finds its hold and does not count twice, one Lease
// cannot give up another's hold, and a second Unlock of the same Lease reports
// dlock.ErrNotHeld. Holds reports the count. A Lease lost while its
// release could not reach the server (see dlock.Lease) leaves its hold
// counted: the lock then stays with its holder until the holding's TTL after
// the last renewal of any of its Leases.
//
// Inspection shows the owner ID as the holder. ForceUnlock removes every hold.
// A key must be locked only through reentrant Clients. rdb and opts are as for
// New. This lock exists on Redis only.
func NewReentrant(rdb redis.UniversalClient, opts ...dlock.Option) (*Client, error) {
	d, err := NewReentrantDriver(rdb)
	if err != nil {
		return nil, err
	}
	return dlock.NewClient(d, opts...)
}

// OwnerWaitMark is how long the place of an owner ID waiting for a reentrant
// lock lives after its last attempt. The owner IDs that wait (others than the
// holder's) take turns in arrival order: while the next of them waits, the
// holder's new re-entries wait too, so that its holds drain instead of
// overlapping forever, and the free lock is the next owner's alone. A waiter
// refreshes its owner's place at least every OwnerWaitMark/5; one that gives up
// takes its owner's place away (the owner's other waiters queue again at their
// next attempt); a waiter that died keeps the others waiting at most this long.
const OwnerWaitMark = 5 * time.Second

// ReentryBar bounds how long a holder's new re-entry by Lock (a waiting
// acquisition) waits for a waiting owner while none of the holder's holds is
// given up. A re-entry nested in a hold (the outer call holds the lock and
// calls code that locks it again with the same owner ID) cannot wait for the
// outer hold to end: it waits at most this long and then re-enters, so nesting
// never deadlocks. Re-entries by Lock from other goroutines or processes of the
// holder wait for the next owner's turn as long as the holder's holds keep
// draining. A single attempt (TryLock) always re-enters at once: it cannot
// wait, and a nested TryLock must not fail; holders that re-enter only by
// overlapping TryLock calls can still keep a waiting owner out.
const ReentryBar = time.Second

var (
	ownerWaitMarkMS = strconv.FormatInt(OwnerWaitMark.Milliseconds(), 10)
	reentryBarMS    = strconv.FormatInt(ReentryBar.Milliseconds(), 10)
)

// ReentrantDriver is the driver.Driver of the reentrant Redis mutex. Most users
// want NewReentrant instead.
type ReentrantDriver struct {
	inspection
	c *conn
}

var (
	_ driver.Notifier  = (*ReentrantDriver)(nil)
	_ driver.Abandoner = (*ReentrantDriver)(nil)
	_ driver.Inspector = (*ReentrantDriver)(nil)
)

// NewReentrantDriver returns the reentrant mutex driver over rdb, configured
// by opts; dlock.NewClient makes a Client over it.
func NewReentrantDriver(rdb redis.UniversalClient, opts ...Option) (*ReentrantDriver, error) {
	c, err := newConn(rdb)
	if err != nil {
		return nil, err
	}
	if _, err := newOptions(rdb, "a reentrant lock", opts); err != nil {
		return nil, err
	}
	d := &ReentrantDriver{c: c}
	d.inspection = inspection{c: c, k: reentrantKind(d.releaseAll)}
	return d, nil
}

// run runs one operation of the reentrant script for owner (holder ID and
// acquisition, see driver.SplitOwner; acq overrides the acquisition when all is
// set: every hold).
func (d *ReentrantDriver) run(ctx context.Context, op, key, owner string, all bool, args ...any) *redis.Cmd {
	holder, acq := driver.SplitOwner(owner)
	if all {
		holder, acq = owner, ""
	}
	return redisscript.Reentrant.Run(ctx, d.c.sc,
		[]string{LockKey(key), FenceKey(key), abandonKey(key, owner), waitingOwnersKey(key)},
		append([]any{op, holder, acq}, args...)...)
}

// Acquire implements driver.Driver. The holder's other holds make it succeed
// with the holding's token. A waiter never queues behind this process's other
// waiters: the holder may be the one re-entering.
func (d *ReentrantDriver) Acquire(ctx context.Context, r driver.AcquireRequest) (driver.Grant, error) {
	return d.c.acquire(ctx, r, &acquisition{
		holder:  d,
		channel: wakeChannel(r.Key),
		run: func(ctx context.Context, t ticket) ([]any, error) {
			markTaken := "0"
			if t.othersWait {
				markTaken = "1"
			}
			return d.run(ctx, "acquire", r.Key, r.Owner, false,
				r.TTL.Milliseconds(), fenceRetentionMS, r.Metadata, waitingArg(r), markTaken,
				ownerWaitMarkMS, reentryBarMS).Slice()
		},
		extra:   true,              // the hold count: see Holds
		refresh: OwnerWaitMark / 5, // the owner's place is refreshed, and left if it gives up
	})
}

// Extend implements driver.Driver: it keeps the whole holding alive at least ttl.
func (d *ReentrantDriver) Extend(ctx context.Context, h driver.Holding, ttl time.Duration) (time.Duration, error) {
	n, err := d.run(ctx, "extend", h.Key, h.Owner, false, ttl.Milliseconds()).Int64()
	return extendReply(h.Key, n, err, ttl)
}

// TTL implements driver.Driver.
func (d *ReentrantDriver) TTL(ctx context.Context, h driver.Holding) (time.Duration, error) {
	n, err := d.run(ctx, "ttl", h.Key, h.Owner, false).Int64()
	return ttlReply(h.Key, n, err)
}

// Release implements driver.Driver: it gives up h's hold, and frees the lock
// (waking waiters) when it was the last.
func (d *ReentrantDriver) Release(ctx context.Context, h driver.Holding) error {
	res, err := d.run(ctx, "release", h.Key, h.Owner, false, d.c.hub.publishCmd(), wakeChannel(h.Key)).Result()
	return d.c.released(h.Key, res, err)
}

// releaseAll removes every hold of holder (ForceUnlock).
func (d *ReentrantDriver) releaseAll(ctx context.Context, key, holder string) error {
	res, err := d.run(ctx, "release", key, holder, true, d.c.hub.publishCmd(), wakeChannel(key)).Result()
	return d.c.released(key, res, err)
}

// Subscribe implements driver.Notifier.
func (d *ReentrantDriver) Subscribe(ctx context.Context, h driver.Holding) (<-chan struct{}, func(), error) {
	return d.c.hub.subscribe(ctx, h.Key, wakeChannel(h.Key), h.Owner)
}

// Abandon implements driver.Abandoner: it gives up the acquisition's hold if an
// attempt landed, takes its owner ID's place among the waiting owners away (see
// OwnerWaitMark), and marks the acquisition abandoned (see AbandonMarkTTL), so
// that an attempt still in flight cannot add a hold after it.
func (d *ReentrantDriver) Abandon(ctx context.Context, h driver.Holding) error {
	_, err := d.run(ctx, "abandon", h.Key, h.Owner, false,
		d.c.hub.publishCmd(), wakeChannel(h.Key), d.c.fl.mark(h)).Result()
	return mapErr(err)
}

// Holds returns how many holds the holder of the reentrant lock named key has
// (0 when the lock is free) and the holder's owner ID. The error matches
// dlock.ErrInvalid for a bad key and dlock.ErrConflict when the key holds
// something else.
func (d *ReentrantDriver) Holds(ctx context.Context, key string) (n int, holder string, err error) {
	if ctx == nil {
		return 0, "", fmt.Errorf("%w: nil context", driver.ErrInvalid)
	}
	if err := driver.ValidateKey(key); err != nil {
		return 0, "", err
	}
	v, err := d.c.rdb.HMGet(ctx, LockKey(key), "o", "c").Result()
	if err != nil {
		return 0, "", mapErr(err)
	}
	holder, _ = v[0].(string)
	count, _ := v[1].(string)
	if holder == "" {
		return 0, "", nil
	}
	n, err = strconv.Atoi(count)
	if err != nil {
		return 0, "", fmt.Errorf("%w: redislock: %q is not a reentrant lock", driver.ErrConflict, key)
	}
	return n, holder, nil
}
