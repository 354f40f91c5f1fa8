package etcdlock

import (
	"time"

	"github.com/dlock-go/dlock"
)

// Grant is what a successful Acquire returns.
type Grant struct {
	Token  uint64        // fencing token: the entry's create revision
	TTL    time.Duration // the lease TTL the server granted, whole seconds
	Handle any           // the holding's state, passed back in Holding.Handle
}

// Holding identifies one holding, or one waiter's queue entry, to the driver.
type Holding struct {
	Key    string
	Owner  string
	Handle any // from Grant.Handle or BusyError.Handle; nil to look the entry up by owner
}

// AcquireRequest is one acquisition attempt.
type AcquireRequest struct {
	Key, Owner string
	TTL        time.Duration
	Metadata   string
	Waiting    bool // queue and stay queued across attempts (Lock); false: do not queue (TryLock)
	Handle     any  // the Handle of this waiter's previous BusyError, nil on the first attempt
}

// BusyError is returned by Acquire when another owner holds the lock. It matches
// dlock.ErrNotObtained.
type BusyError struct {
	Remaining  time.Duration // the holder's lease time left, <0 unknown
	RetryAfter time.Duration // how long a waiter may sleep without a wake before retrying
	Handle     any           // the waiter's queue entry, nil when it did not queue
}

// Error says that the lock is held.
func (e *BusyError) Error() string {
	return (&dlock.BusyError{Remaining: e.Remaining}).Error()
}

// Is makes a *BusyError match dlock.ErrNotObtained.
func (e *BusyError) Is(target error) bool { return target == dlock.ErrNotObtained }

// TTLLimits are the lease times the driver can grant.
type TTLLimits struct {
	Min, Max, Step time.Duration
}

// LockInfo is what the server holds about one lock.
type LockInfo struct {
	Key, Owner, Metadata string
	Token                uint64
	TTL                  time.Duration // time left, <0 unknown
	Waiters              int
}
