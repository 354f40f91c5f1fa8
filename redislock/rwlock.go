package redislock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redisscript"
	"github.com/redis/go-redis/v9"
)

// WriterWaitMark is how long the queue entry of a writer waiting for a
// read-write lock lives after its last attempt. Writers that wait queue in
// arrival order, across Clients; the first of them is the next writer: new
// readers wait until it has had its turn, so that it is not starved by a stream
// of readers, and the writers behind it wait for theirs. A writer that died
// while waiting bars the others at most this long; one that gives up leaves the
// queue at once. A waiting writer refreshes its entry (or tries to take the
// lock) at least every WriterWaitMark/5.
const WriterWaitMark = 5 * time.Second

var writerWaitMarkMS = strconv.FormatInt(WriterWaitMark.Milliseconds(), 10)

// ErrUpgrade reports a refused read-to-write upgrade (see RWMutex.Upgrade). It
// matches dlock.ErrInvalid.
var ErrUpgrade = fmt.Errorf("%w: redislock: a read lock cannot be upgraded to a write lock (two readers upgrading would wait for each other forever); unlock it and take the write lock", driver.ErrInvalid)

// RWMutex is a read-write lock on Redis: any number of readers or one writer
// hold a key at a time. The embedded *Client takes the write lock (TryLock,
// Lock); RLocker returns the Client that takes read locks. Both share one
// connection and one wake-up subscription.
//
// Every reader holds its own lease (owner, fencing token, TTL, watchdog, loss
// signal), so a crashed reader's share comes back at its TTL. Readers and writers
// draw their fencing tokens from one counter per key.
//
// Readers and writers take turns, and neither starves the other: writers that
// wait queue first come, first served (see WriterWaitMark), the first of them
// bars new readers, and the last reader to leave wakes it alone; a writer's release hands a read lease to every reader waiting
// at that moment (they go in together, before the next writer) and wakes every
// waiter at once. A waiting reader refreshes its place at least every
// FairWaiterTTL/5; a read lease handed to a reader that died meanwhile comes back
// after FairWaiterTTL.
// As with sync.RWMutex, a holder of a read lock must not take another read lock
// of the same key while a writer may wait: the second read waits for the writer,
// which waits for the first.
//
// A read lock is never upgraded to a write lock (Upgrade refuses with
// ErrUpgrade); a write lock can be downgraded to a read lock atomically
// (Downgrade).
//
// A key is used either as a read-write lock or as another kind of lock: the
// others see dlock.ErrConflict. Both Clients are dlock.Inspectors: Inspect shows
// the writer, or the number of readers (LockInfo.Holders) and the reader whose
// lease ends last, and Waiters counts the waiting writers and readers; ForceUnlock removes
// every holder.
//
// Read-write locks exist on the Redis backend (this package).
type RWMutex struct {
	*Client         // the write lock
	r       *Client // the read lock
	rd      *RWDriver
	opts    []dlock.Option // the defaults of both sides, and of a Downgrade's read lease
}

// NewRWMutex returns a read-write lock client over rdb. rdb and opts are as for
// New (opts are the defaults of both the read and the write side); it returns an
// error matching dlock.ErrInvalid for a nil client or a bad option, and does no
// I/O.
func NewRWMutex(rdb redis.UniversalClient, opts ...dlock.Option) (*RWMutex, error) {
	c, err := newConn(rdb)
	if err != nil {
		return nil, err
	}
	l := newMultiHolder(c, rwMarker)
	wd, rd := &RWDriver{multiHolder: l, write: true}, &RWDriver{multiHolder: l}
	w, err := dlock.NewClient(wd, opts...)
	if err != nil {
		return nil, err
	}
	r, err := dlock.NewClient(rd, opts...)
	if err != nil {
		return nil, err
	}
	return &RWMutex{Client: w, r: r, rd: rd, opts: opts}, nil
}

// RLocker returns the Client that takes read (shared) locks of m's keys.
func (m *RWMutex) RLocker() *Client {
	if m == nil {
		return nil
	}
	return m.r
}

// Upgrade refuses to turn the read lock read into a write lock: it returns an
// error matching ErrUpgrade (and dlock.ErrInvalid), and read stays held. An
// upgrade cannot be made safe: two readers upgrading at once would each wait for
// the other to leave. Unlock the read lock and take the write lock instead,
// knowing that another writer may come in between.
func (m *RWMutex) Upgrade(ctx context.Context, read *dlock.Lease) (*dlock.Lease, error) {
	if err := m.check(ctx, read); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("%w (%q)", ErrUpgrade, read.Key())
}

// Downgrade turns the write lock write into a read lock atomically: in one step
// on the server, the writer leaves and a reader with a fresh lease and fencing
// token takes its place, and the waiting readers are woken, so that no other
// writer can come in between. opts are as for TryLock (the new lease's TTL,
// renewal, metadata). write ends (its Unlock then reports dlock.ErrNotHeld). The
// error matches dlock.ErrInvalid when write is not a write lease of a
// read-write lock (a read lease, a lease of a lock of another kind on the key),
// and nothing changes: such a lease stays held. It matches dlock.ErrNotHeld
// when write holds nothing any more (or is nil, or a lease of a key that holds
// no lock).
func (m *RWMutex) Downgrade(ctx context.Context, write *dlock.Lease, opts ...dlock.Option) (*dlock.Lease, error) {
	if err := m.check(ctx, write); err != nil {
		return nil, err
	}
	if err := write.Err(); err != nil {
		if !errors.Is(err, driver.ErrNotHeld) {
			err = fmt.Errorf("%w: %w", driver.ErrNotHeld, err)
		}
		return nil, err
	}
	if typ, err := m.rd.c.rdb.Type(ctx, LockKey(write.Key())).Result(); err == nil && typ == "string" {
		return nil, fmt.Errorf("%w: redislock: the lease is a plain mutex's, not a write lease", driver.ErrInvalid)
	}
	// The read acquisition takes over the writer's holding: a Client of its
	// own, over a read driver that names the writer, makes it.
	c, err := dlock.NewClient(&RWDriver{multiHolder: m.rd.multiHolder, from: write.Owner()}, m.opts...)
	if err != nil {
		return nil, err
	}
	read, err := c.TryLock(ctx, write.Key(), opts...)
	if err != nil {
		return nil, err
	}
	_ = write.Unlock(ctx) // not held any more: stops its watchdog and timers
	return read, nil
}

func (m *RWMutex) check(ctx context.Context, l *dlock.Lease) error {
	switch {
	case m == nil || m.Client == nil:
		return fmt.Errorf("%w: nil RWMutex", driver.ErrInvalid)
	case ctx == nil:
		return fmt.Errorf("%w: nil context", driver.ErrInvalid)
	case l == nil || l.Key() == "":
		return fmt.Errorf("%w: nil lease", driver.ErrNotHeld)
	}
	return nil
}

// RWDriver is the driver.Driver of one side (read or write) of a read-write lock.
// Most users want NewRWMutex instead.
type RWDriver struct {
	multiHolder
	write bool
	from  string // for a Downgrade: the writer whose holding a read acquisition takes over
}

var (
	_ driver.Notifier  = (*RWDriver)(nil)
	_ driver.Abandoner = (*RWDriver)(nil)
	_ driver.Inspector = (*RWDriver)(nil)
)

// Acquire implements driver.Driver.
func (d *RWDriver) Acquire(ctx context.Context, r driver.AcquireRequest) (driver.Grant, error) {
	mode, refresh := "r", FairWaiterTTL/5 // the reader's entry is refreshed
	if d.write {
		mode, refresh = "w", WriterWaitMark/5 // the writer's queue entry is refreshed, and removed if it gives up
	}
	return d.c.acquire(ctx, r, &acquisition{
		holder:  d,
		channel: wakeChannel(r.Key),
		run: func(ctx context.Context, _ ticket) ([]any, error) {
			return redisscript.RWAcquire.Run(ctx, d.c.sc, rwKeys(r.Key, r.Owner),
				r.Owner, r.TTL.Milliseconds(), fenceRetentionMS, r.Metadata, waitingArg(r), mode,
				writerWaitMarkMS, d.c.hub.publishCmd(), wakeChannel(r.Key), d.from, fairWaiterTTLMS).Slice()
		},
		refused: func(res []any, err error) error {
			if err != nil || len(res) != 2 {
				return nil
			}
			switch res[0] {
			case int64(3):
				return fmt.Errorf("%w: %q is not write-locked by this lease", driver.ErrNotHeld, r.Key)
			case int64(4):
				return fmt.Errorf("%w: redislock: Downgrade of a lease that is not a write lease of the read-write lock %q", driver.ErrInvalid, r.Key)
			}
			return nil
		},
		refresh: refresh,
	})
}

// Release implements driver.Driver.
func (d *RWDriver) Release(ctx context.Context, h driver.Holding) error {
	return d.leave(ctx, h.Key, h.Owner, "")
}

// leave gives up owner's place in key: its holding, or its entry when it
// waits. With mark set (Abandon) the acquisition is also marked abandoned.
func (d *RWDriver) leave(ctx context.Context, key, owner, mark string) error {
	c := d.c
	res, err := redisscript.RWRelease.Run(ctx, c.sc, rwKeys(key, owner),
		owner, c.hub.publishCmd(), wakeChannel(key), mark, fenceRetentionMS, fairWaiterTTLMS).Result()
	return c.released(key, res, err)
}

// Subscribe implements driver.Notifier.
func (d *RWDriver) Subscribe(ctx context.Context, h driver.Holding) (<-chan struct{}, func(), error) {
	return d.c.hub.subscribe(ctx, h.Key, wakeChannel(h.Key), h.Owner)
}

// Abandon implements driver.Abandoner: a holding that landed is released, a
// waiting writer's or reader's entry is removed, and the acquisition is marked abandoned (see
// AbandonMarkTTL).
func (d *RWDriver) Abandon(ctx context.Context, h driver.Holding) error {
	return abandoned(d.leave(ctx, h.Key, h.Owner, d.c.fl.mark(h)))
}
