package redislock

import (
	"context"
	"fmt"
	"strconv"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redisscript"
	"github.com/redis/go-redis/v9"
)

// MaxPermits is the largest number of permits a semaphore may have.
const MaxPermits = 1 << 20

// ErrLimitMismatch reports that a semaphore is stored with another number of
// permits than the one the caller's Client was made with (clients disagree about
// N), or that a Client made with StoredSize found no size to adopt. Nothing was
// changed. It matches dlock.ErrConflict.
var ErrLimitMismatch error = &limitError{}

type limitError struct{}

func (*limitError) Error() string {
	return "redislock: semaphore stored with another number of permits"
}

// Is makes ErrLimitMismatch match dlock.ErrConflict.
func (*limitError) Is(target error) bool { return target == driver.ErrConflict }

// StoredSize, in place of a number of permits, makes a semaphore Client that
// takes each key's stored size (see Resize) whatever it is, and otherwise the
// size of the key's holders; with neither, its TryLock and Lock fail with an
// error matching ErrLimitMismatch.
const StoredSize = -1

// NewSemaphore returns a Client whose locks are counting semaphores of n
// permits: at most n leases of a key are held at once, each with its own owner,
// fencing token (drawn from the key's one counter), TTL, watchdog and loss
// signal, exactly as a mutex lease. TryLock and Lock take a permit, the lease's
// Unlock gives it back, and a holder that crashes gives its permit back when its
// TTL runs out. With n = 1 it behaves as a fair mutex.
//
// Waiters queue in Redis in arrival order, across processes, and a permit that
// becomes free goes to the head of the queue, which alone is woken: one waiter
// per freed permit, no herd, and no barging by TryLock while others queue. A
// waiter whose Lock gives up leaves the queue at once (a permit handed to it
// meanwhile goes on to the next); one that dies is dropped after FairWaiterTTL,
// and a permit handed to it comes back after FairWaiterTTL as well. A waiting
// Lock makes an attempt, which keeps its place, at least every FairWaiterTTL/5.
//
// The number of permits is stored with the semaphore while any permit is held:
// a Client made with another n gets an error matching ErrLimitMismatch (and
// dlock.ErrConflict) from TryLock and Lock, and takes nothing. A key is used
// either as a semaphore or as another kind of lock: the others see
// dlock.ErrConflict.
//
// Client.Resize (SemaphoreDriver.Resize) changes the number of permits of a
// key for every Client, in every process: the size it stores (under SizeKey,
// without expiry) is the truth from then on, and n is the initial size only.
// Clients made with the key's size before its first resize, or with the size
// in force, go on working under the size in force; others get
// ErrLimitMismatch, unless made with StoredSize, which adopts whatever is
// stored.
//
// The Client is a driver.Inspector: Inspect shows the permits in use
// (LockInfo.Holders), n (LockInfo.Limit), the queued waiters, and the lease
// that ends last; ForceUnlock removes every permit.
//
// It returns an error matching dlock.ErrInvalid for n outside [1, MaxPermits]
// (but StoredSize), a nil client, or a bad option; it does no I/O. rdb and opts
// are as for New.
func NewSemaphore(rdb redis.UniversalClient, n int, opts ...dlock.Option) (*Client, error) {
	d, err := NewSemaphoreDriver(rdb, n)
	if err != nil {
		return nil, err
	}
	return dlock.NewClient(d, opts...)
}

// SemaphoreDriver is the driver.Driver of the counting semaphore. Most users want
// NewSemaphore instead.
type SemaphoreDriver struct {
	multiHolder
	c *conn
	n string // the number of permits, in decimal ("0": StoredSize)
}

var (
	_ driver.Notifier  = (*SemaphoreDriver)(nil)
	_ driver.Abandoner = (*SemaphoreDriver)(nil)
	_ driver.Inspector = (*SemaphoreDriver)(nil)
	_ driver.Resizer   = (*SemaphoreDriver)(nil)
)

// NewSemaphoreDriver returns the driver of a semaphore of n permits (or
// StoredSize) over rdb, configured by opts; dlock.NewClient makes a Client over
// it.
func NewSemaphoreDriver(rdb redis.UniversalClient, n int, opts ...Option) (*SemaphoreDriver, error) {
	if n != StoredSize {
		if err := checkPermits(n); err != nil {
			return nil, err
		}
	}
	c, err := newConn(rdb)
	if err != nil {
		return nil, err
	}
	if _, err := newOptions(rdb, "a semaphore", opts); err != nil {
		return nil, err
	}
	return &SemaphoreDriver{multiHolder: newMultiHolder(c, semMarker), c: c, n: strconv.Itoa(max(n, 0))}, nil
}

// Acquire implements driver.Driver.
func (d *SemaphoreDriver) Acquire(ctx context.Context, r driver.AcquireRequest) (driver.Grant, error) {
	return d.c.acquire(ctx, r, &acquisition{
		holder:  d,
		channel: wakeChannel(r.Key),
		run: func(ctx context.Context, _ ticket) ([]any, error) {
			return redisscript.SemAcquire.Run(ctx, d.c.sc, semKeys(r.Key, r.Owner),
				r.Owner, r.TTL.Milliseconds(), fenceRetentionMS, r.Metadata, waitingArg(r),
				fairWaiterTTLMS, d.c.hub.publishCmd(), wakeChannel(r.Key), d.n).Slice()
		},
		refused: func(_ []any, err error) error {
			if n, ok := limitReply(err); ok {
				if n == "0" {
					return fmt.Errorf("%w: %q has no stored size to adopt", ErrLimitMismatch, r.Key)
				}
				return fmt.Errorf("%w: %q has %s permits, this client %s", ErrLimitMismatch, r.Key, n, d.n)
			}
			return nil
		},
		refresh: FairWaiterTTL / 5,
	})
}

// Release implements driver.Driver: the permit goes to the head of the queue,
// which is woken.
func (d *SemaphoreDriver) Release(ctx context.Context, h driver.Holding) error {
	return d.leave(ctx, h.Key, h.Owner, "")
}

// leave gives up owner's place in key: its holding, or its entry when it
// waits. With mark set (Abandon) the acquisition is also marked abandoned.
func (d *SemaphoreDriver) leave(ctx context.Context, key, owner, mark string) error {
	res, err := redisscript.SemRelease.Run(ctx, d.c.sc, semKeys(key, owner),
		owner, fenceRetentionMS, fairWaiterTTLMS, d.c.hub.publishCmd(), wakeChannel(key), mark).Result()
	return d.c.released(key, res, err)
}

// Subscribe implements driver.Notifier.
func (d *SemaphoreDriver) Subscribe(ctx context.Context, h driver.Holding) (<-chan struct{}, func(), error) {
	return d.c.hub.subscribe(ctx, h.Key, wakeChannel(h.Key), h.Owner)
}

// Abandon implements driver.Abandoner: the waiter leaves the queue, a permit it
// holds or was handed goes on to the next waiter, and the acquisition is marked
// abandoned (see AbandonMarkTTL).
func (d *SemaphoreDriver) Abandon(ctx context.Context, h driver.Holding) error {
	return abandoned(d.leave(ctx, h.Key, h.Owner, d.c.fl.mark(h)))
}

// checkPermits returns an error matching dlock.ErrInvalid unless n is in [1,
// MaxPermits].
func checkPermits(n int) error {
	if n < 1 || n > MaxPermits {
		return fmt.Errorf("%w: %d permits outside [1, %d]", driver.ErrInvalid, n, MaxPermits)
	}
	return nil
}

// Resize implements driver.Resizer in one script call: it stores n as the size
// of the semaphore key (under SizeKey, without expiry) and hands the permits
// a raised size frees to the head of the queue, waking each waiter it serves
// by name. Holders above a lowered size keep their permits until they release
// them or their leases end; no permit is granted meanwhile. A key held as
// another kind of lock is dlock.ErrConflict; n outside [1, MaxPermits] is
// dlock.ErrInvalid.
func (d *SemaphoreDriver) Resize(ctx context.Context, key string, n int) error {
	if err := driver.ValidateKey(key); err != nil {
		return err
	}
	if err := checkPermits(n); err != nil {
		return err
	}
	err := redisscript.SemResize.Run(ctx, d.c.sc, semKeys(key, ""), n, d.n,
		fairWaiterTTLMS, fenceRetentionMS, d.c.hub.publishCmd(), wakeChannel(key)).Err()
	return mapErr(err)
}
