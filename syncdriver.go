package dlock

import (
	"context"
	"time"
)

// SyncDriver is the backend side of Latch and Barrier: single attempts in one
// store, with no waiting or renewal (Latch and Barrier do those, the same way
// for every backend). Users do not call a SyncDriver; backend packages implement
// it.
//
// Every name has been checked by ValidateKey, every count and number of parties
// is at least 1, every TTL is within the driver's TTLLimits (when it is a
// TTLLimiter) and every party is a random owner string. A latch and a barrier of
// a name live apart from each other and from the locks of that name. Errors wrap
// the dlock sentinels as a Driver's do: ErrConflict when the name's storage holds
// foreign data or a latch or barrier made with another count or number of
// parties, ErrUnavailable (joined with the cause) for network failures, ErrRefused
// for refusals that waiting does not cure. Context errors are returned as they
// are.
type SyncDriver interface {
	// CountDown lowers the count of the latch name by one and returns the
	// count after it. A latch that does not exist is created with count n
	// first; a count of zero stays zero. Every call keeps the latch for ttl
	// more: a latch nobody counts down or reads for ttl is forgotten.
	CountDown(ctx context.Context, name string, n int, ttl time.Duration) (int, error)

	// LatchCount returns the count of the latch name (n when it does not
	// exist, which it does not create) and keeps an existing latch for ttl
	// more.
	LatchCount(ctx context.Context, name string, n int, ttl time.Duration) (int, error)

	// Arrive records party at the barrier name of n parties, for ttl (a
	// party's arrival is a lease: calling Arrive again renews it, and an
	// arrival not renewed within ttl is dropped), and reports whether the
	// barrier is open. The barrier opens when n parties' arrivals are live
	// at once, and stays open until every party has departed.
	Arrive(ctx context.Context, name, party string, n int, ttl time.Duration) (open bool, err error)

	// Withdraw takes back party's arrival at the barrier name unless the
	// barrier is open, and reports whether it is (the arrival then stays: it
	// was counted).
	Withdraw(ctx context.Context, name, party string, n int) (open bool, err error)

	// Depart removes party from the barrier name, if there, and returns the
	// number of parties still there (live arrivals) and the time until the
	// first of their arrivals lapses unless renewed. When none is left the
	// barrier is removed, shut again for its next use.
	Depart(ctx context.Context, name, party string, n int) (present int, lapse time.Duration, err error)

	// WatchSync returns a channel that receives a value (without blocking
	// the sender; capacity 1) whenever the latch or the barrier name may have
	// changed, or when notifications were (re)established and messages may
	// have been missed. cancel releases the registration; it must be called
	// exactly once. A driver that cannot notify returns an error wrapping
	// errors.ErrUnsupported, and waiters poll.
	WatchSync(ctx context.Context, name string) (wake <-chan struct{}, cancel func(), err error)
}
