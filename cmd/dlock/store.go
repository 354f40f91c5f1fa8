package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// store is what the subcommands need from a lock server.
type store interface {
	// String names the server for messages, without credentials.
	String() string
	// locker returns the lock of the requested kind (a semaphore of permits
	// permits), with opts as its defaults.
	locker(kind lockKind, permits int, opts ...dlock.Option) (dlock.Locker, error)
	// inspector shows and forces the server's locks (status, list, unlock).
	inspector() driver.Inspector
	// failures returns the log of the lock operations' failures; nil when
	// the backend keeps none.
	failures() *failureLog
	// explain returns err, or for an err matching dlock.ErrConflict an error
	// saying what the server holds under key instead of a lock (exit 65).
	explain(ctx context.Context, key string, err error) error
	close()
}

// lockKind is the primitive a run asks for.
type lockKind int

// The kinds of lock a run takes: plain (no flag), --fair, -n N, -s and -x.
const (
	plainLock     lockKind = iota // the exclusive lock
	fairLock                      // the exclusive lock, waiters served in arrival order
	semaphoreLock                 // one of the permits of a semaphore
	readLock                      // the shared side of a read-write lock
	writeLock                     // the exclusive side of a read-write lock
)

// mutexStore is a store whose backend has one kind of lock, the exclusive one:
// one constructor makes the lock of every run. It serves etcd and ZooKeeper
// (whose locks are first come, first served already, so --fair needs nothing
// more), and PostgreSQL through pgStore.
type mutexStore struct {
	where  string
	newc   func(opts ...dlock.Option) (dlock.Locker, error)
	insp   driver.Inspector
	plain  string // the kind of its plain lock: driver.KindMutex or KindFair
	closer func()
	// purge deletes the entries of the locks named keys (dlock verify's
	// own, and nothing else) and returns how many entries it removed.
	purge func(ctx context.Context, keys []string) (int, error)
	sync  driver.SyncDriver // latches and barriers (sync.go); nil without them
}

func (s *mutexStore) String() string { return s.where }

func (s *mutexStore) close() { s.closer() }

func (s *mutexStore) locker(kind lockKind, permits int, opts ...dlock.Option) (dlock.Locker, error) {
	if kind == semaphoreLock {
		return nil, usageErrorf("-n %d: semaphores are not available on %s", permits, s.where)
	}
	// --fair needs nothing more: waiters are served in arrival order.
	return s.newc(opts...)
}

func (s *mutexStore) inspector() driver.Inspector { return s.insp }

// plainKind is the kind the dashboard gives a lock in its lock-delay, which
// the backends report without one: only a plain lock keeps a delay, a mutex
// on Redis, PostgreSQL and MySQL, a fair lock on etcd and ZooKeeper.
func plainKind(st store) string {
	switch s := st.(type) {
	case *mutexStore:
		return s.plain
	case pgStore:
		return s.plain
	case mysqlStore:
		return s.plain
	}
	return driver.KindMutex
}

func (s *mutexStore) failures() *failureLog { return nil }

func (s *mutexStore) explain(_ context.Context, key string, err error) error {
	if !errors.Is(err, dlock.ErrConflict) {
		return err
	}
	return &exitError{code: exitDataErr, msg: fmt.Sprintf("key %q holds data that is not a dlock lock on %s: %v", key, s.where, err)}
}

// inspectLock reads one lock through st's inspector.
func inspectLock(ctx context.Context, st store, key string) (lockInfo, error) {
	info, err := st.inspector().Inspect(ctx, key)
	if err != nil {
		return lockInfo{}, st.explain(ctx, key, err)
	}
	return newLockInfo(info), nil
}

// listLocks lists the locks matching pattern through st's inspector.
func listLocks(ctx context.Context, st store, pattern string) ([]lockInfo, error) {
	infos, err := driver.List(ctx, st.inspector(), pattern)
	if err != nil {
		return nil, err
	}
	out := make([]lockInfo, len(infos))
	for i, info := range infos {
		out[i] = newLockInfo(info)
	}
	return out, nil
}

// forceUnlock removes the holding of key through st's inspector.
func forceUnlock(ctx context.Context, st store, key string) (lockInfo, error) {
	info, err := st.inspector().ForceUnlock(ctx, key)
	if err != nil && !errors.Is(err, dlock.ErrNotHeld) {
		return lockInfo{}, st.explain(ctx, key, err)
	}
	return newLockInfo(info), err
}

// (" (Redis key ... is a list)"), or is empty.
func conflictError(key, what string) error {
	return &exitError{code: exitDataErr, msg: fmt.Sprintf("key %q holds data that is not a dlock lock%s", key, what)}
}

// foreignData says which Redis key holds data that is not a dlock lock when

func newLockInfo(info dlock.LockInfo) lockInfo {
	li := lockInfo{Key: info.Key, Held: info.Held, Token: info.Token, LastToken: info.LastToken, Waiters: info.Waiters}
	if info.DelayLeft > 0 {
		until := time.Now().Add(info.DelayLeft).UTC().Truncate(time.Millisecond)
		li.DelayMS, li.DelayTo = max(info.DelayLeft.Milliseconds(), 1), &until
	}
	if info.Held {
		li.TTLms = info.TTL.Milliseconds()
		li.Holder, li.Metadata = parseMeta(info.Metadata, info.Token)
		li.Holders, li.Limit = info.Holders, info.Limit
		if li.Holders == 0 {
			// A backend that does not count holders has exclusive locks only:
			// the same shape as on Redis.
			li.Holders, li.Limit = 1, 1
		}
		li.LastToken = max(li.LastToken, li.Token)
	}
	return li
}
