package dlock

import (
	"fmt"

	"github.com/dlock-go/dlock/driver"
)

// Sentinel errors. Every error returned by this module wraps one of them, a
// context error, or errors.ErrUnsupported (a backend without a capability), so
// callers branch with errors.Is. They are the values of package driver, which
// backends return.
var (
	// ErrNotObtained reports that the lock is held by somebody else and could not be
	// taken within the allowed attempts, wait time or context.
	ErrNotObtained = driver.ErrNotObtained

	// ErrNotHeld reports that the caller does not hold the lock (any more): it was
	// released, it expired, somebody else holds it now, or it was never ours.
	ErrNotHeld = driver.ErrNotHeld

	// ErrLockLost is the cause of a Lease's context when the lock can no longer be
	// guaranteed: a renewal was refused, or no renewal succeeded before the local
	// deadline (a fixed lease's TTL ran out, the MaxHold cap was reached, or
	// renewals failed); the wrapping error's text names which.
	// errors.Is(ErrLockLost, ErrNotHeld) is true.
	ErrLockLost = driver.ErrLockLost

	// ErrReleased is the cause of a Lease's context after a successful Unlock.
	ErrReleased = driver.ErrReleased

	// ErrInvalid reports a bad argument or option. It is returned before any I/O.
	ErrInvalid = driver.ErrInvalid

	// ErrConflict reports that the key's storage holds data that is not a dlock lock
	// of this kind (for Redis: a value of another type). Nothing was changed.
	ErrConflict = driver.ErrConflict

	// ErrUnavailable reports that the backend could not be reached or did not answer.
	// The underlying network or server error is wrapped as well.
	ErrUnavailable = driver.ErrUnavailable

	// ErrRefused reports that the backend answered but refused the operation for a
	// reason that waiting will not cure: missing permissions (Redis ACL NOPERM),
	// failed authentication, or a server error dlock does not know. Lock does not
	// retry it. errors.Is(ErrRefused, ErrUnavailable) is true.
	ErrRefused = driver.ErrRefused

	// ErrStaleToken reports a fenced operation refused because a newer fencing token
	// has already been used on the same resource. Nothing was changed.
	ErrStaleToken = driver.ErrStaleToken
)

// BusyError is the error of TryLock (and the last attempt of a Lock that gave
// up) when another owner holds the lock. It matches ErrNotObtained.
type BusyError = driver.BusyError

// LockInfo describes one lock as its store sees it; see Client.Inspect.
type LockInfo = driver.LockInfo

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}
