package driver

import (
	"context"
	"slices"
	"strings"
	"time"
)

// KeyWatcher is implemented by Inspectors (and by Drivers, which a Client then
// forwards to) whose store can report changes of a lock as they happen: etcd's
// watch, ZooKeeper's watches. Observe uses it instead of polling.
type KeyWatcher interface {
	// WatchKey returns a channel that receives a value whenever the lock named
	// key may have changed (taken, released, handed over, expired, a waiter
	// queued or gone). The channel has capacity 1 and is never blocked on: a
	// value may stand for several changes. It is closed when ctx ends or the
	// watch fails; a caller that still wants changes then polls. The error
	// matches ErrInvalid for a bad key or a nil context.
	WatchKey(ctx context.Context, key string) (<-chan struct{}, error)
}

// LockInfo is what a store holds about one lock, as read by an Inspector. It is a
// snapshot: the lock may change hands right after.
type LockInfo struct {
	Key      string        // the lock name, as passed to Lock
	Held     bool          // whether somebody holds the lock
	Owner    string        // the holder's owner token; empty when free
	Token    uint64        // the holder's fencing token; 0 when free
	Metadata string        // the holder's WithMetadata text; may be empty
	TTL      time.Duration // time left before the holding expires unless renewed; <0 unknown
	Waiters  int           // waiters the store knows of; WaitersUnknown when its waiters wait unseen, in their own processes

	// Holders is the number of leases held: 1 for a held exclusive lock, the
	// permits in use of a semaphore, the readers of a read-write lock. Owner,
	// Token, Metadata and TTL then describe one of them (see the backend).
	Holders int

	// Limit is the most holders the lock admits at once as it stands: 1 for an
	// exclusive lock or a write lock, N for a semaphore of N permits, 0 for no
	// limit (a read lock, shared by any number of readers) or when free.
	Limit int

	// LastToken is the newest fencing token handed out for the key, also after
	// the lock was released, where the store keeps it; 0 when unknown.
	LastToken uint64

	// Kind is the kind of lock the key holds (KindMutex, KindFair,
	// KindReentrant, KindReadWrite, KindSemaphore), or "" when free or when the
	// backend cannot tell.
	Kind string

	// DelayLeft, when positive, says that the lock is in its lock-delay (see
	// AcquireRequest.Delay): its last holding ended without a release, Held is
	// false, and nobody can take the lock for DelayLeft more, as the store's
	// clock counts. List returns such locks beside the held ones.
	DelayLeft time.Duration
}

// WaitersUnknown is LockInfo.Waiters for a lock whose waiters the store does
// not know of (they wait in their own processes, and only they know): it says
// nothing of whether anybody waits, while 0 means nobody does.
const WaitersUnknown = -1

// The kinds of lock a LockInfo names.
const (
	KindMutex     = "mutex"      // an exclusive lock, not fair (New on every backend)
	KindFair      = "fair"       // an exclusive lock granted in arrival order
	KindReentrant = "reentrant"  // an exclusive lock that its owner ID may take again
	KindReadWrite = "read-write" // readers or one writer
	KindSemaphore = "semaphore"  // at most Limit holders
)

// Inspector is implemented by drivers (and clients) that can show and force locks,
// for operators and tools such as the dlock command. Inspect and ForceUnlock
// validate their key first (ErrInvalid); List, not a method, validates the
// pattern, filters and sorts for every driver.
type Inspector interface {
	// Inspect reads one lock without changing it. A free lock is not an error:
	// the result has Held false.
	Inspect(ctx context.Context, key string) (LockInfo, error)

	// ListPrefix returns the held locks (and those in their lock-delay) whose names start with prefix (all of
	// them when prefix is empty), in any order; it may return more (locks that
	// are not held, or names without the prefix): List drops them. prefix is
	// the literal start of a pattern that ValidatePattern accepted.
	ListPrefix(ctx context.Context, prefix string) ([]LockInfo, error)

	// ForceUnlock removes the holding of key whoever holds it, and returns what
	// it removed. A free lock is ErrNotHeld (with Held false in the result). A
	// backend that can should tell the holder at once (Grant.Lost); otherwise
	// the holder learns of the loss at its next renewal or its local deadline.
	// A holding taken with a lock-delay leaves the lock in its delay.
	ForceUnlock(ctx context.Context, key string) (LockInfo, error)
}

// List returns the locks held (or in their lock-delay) in in's store whose names match pattern (a glob
// as MatchKey reads it, checked by ValidatePattern), sorted by key: it asks
// in.ListPrefix for the literal start of the pattern and keeps the held locks
// that match.
func List(ctx context.Context, in Inspector, pattern string) ([]LockInfo, error) {
	if ctx == nil {
		return nil, invalidf("nil context")
	}
	if IsNil(in) {
		return nil, invalidf("nil inspector")
	}
	if err := ValidatePattern(pattern); err != nil {
		return nil, err
	}
	all, err := in.ListPrefix(ctx, literalPrefix(pattern))
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for _, info := range all {
		if (info.Held || info.DelayLeft > 0) && MatchKey(pattern, info.Key) {
			out = append(out, info)
		}
	}
	slices.SortFunc(out, func(a, b LockInfo) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// literalPrefix is the start of a pattern before its first wildcard or
// escape: every key the pattern matches starts with it.
func literalPrefix(pattern string) string {
	if i := strings.IndexAny(pattern, `*?[\`); i >= 0 {
		return pattern[:i]
	}
	return pattern
}
