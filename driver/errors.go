package driver

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Every error returned by this module wraps one of them, a
// context error, or errors.ErrUnsupported (a backend without a capability), so
// callers branch with errors.Is.
var (
	// ErrNotObtained reports that the lock is held by somebody else and could not be
	// taken within the allowed attempts, wait time or context.
	ErrNotObtained = errors.New("dlock: not obtained")

	// ErrNotHeld reports that the caller does not hold the lock (any more): it was
	// released, it expired, somebody else holds it now, or it was never ours.
	ErrNotHeld = errors.New("dlock: not held")

	// ErrLockLost is the cause of a Lease's context when the lock can no longer be
	// guaranteed: a renewal was refused, or no renewal succeeded before the local
	// deadline (a fixed lease's TTL ran out, the MaxHold cap was reached, or
	// renewals failed); the wrapping error's text names which.
	// errors.Is(ErrLockLost, ErrNotHeld) is true.
	ErrLockLost error = &lostError{}

	// ErrReleased is the cause of a Lease's context after a successful Unlock.
	ErrReleased = errors.New("dlock: released")

	// ErrInvalid reports a bad argument or option. It is returned before any I/O.
	ErrInvalid = errors.New("dlock: invalid argument")

	// ErrConflict reports that the key's storage holds data that is not a dlock lock
	// of this kind (for Redis: a value of another type). Nothing was changed.
	ErrConflict = errors.New("dlock: key holds foreign data")

	// ErrUnavailable reports that the backend could not be reached or did not answer.
	// The underlying network or server error is wrapped as well.
	ErrUnavailable = errors.New("dlock: backend unavailable")

	// ErrRefused reports that the backend answered but refused the operation for a
	// reason that waiting will not cure: missing permissions (Redis ACL NOPERM),
	// failed authentication, or a server error dlock does not know. Lock does not
	// retry it. errors.Is(ErrRefused, ErrUnavailable) is true, so code that treats
	// every backend failure alike needs no new case.
	ErrRefused error = &refusedError{}

	// ErrStaleToken reports a fenced operation refused because a newer fencing token
	// has already been used on the same resource. Nothing was changed.
	ErrStaleToken = errors.New("dlock: stale fencing token")

	// ErrNotSent is wrapped, beside the error that ended it, into the error of
	// an acquisition attempt that the driver knows left nothing in flight: it
	// never reached the store (it waited for a connection until its context
	// ended), or what it sent can no longer reach it. The Client then has
	// nothing to abandon for that attempt. A driver that cannot tell returns
	// the error alone.
	ErrNotSent = errors.New("not sent")
)

type refusedError struct{}

func (*refusedError) Error() string { return "dlock: refused by the backend" }

// Is makes ErrRefused match ErrUnavailable.
func (*refusedError) Is(target error) bool { return target == ErrUnavailable }

type lostError struct{}

func (*lostError) Error() string { return "dlock: lock lost" }

// Is makes ErrLockLost match ErrNotHeld.
func (*lostError) Is(target error) bool { return target == ErrNotHeld }

// BusyError is the error of TryLock (and the last attempt of a Lock that gave
// up) when another owner holds the lock. It matches ErrNotObtained.
type BusyError struct {
	// Remaining is the holder's time to live as the store saw it, or a negative
	// value when unknown.
	Remaining time.Duration
}

// Error says that the lock is held, and for how long more when known.
func (e *BusyError) Error() string { return busyText(e.Remaining) }

// Is makes a *BusyError match ErrNotObtained.
func (e *BusyError) Is(target error) bool { return target == ErrNotObtained }

func busyText(remaining time.Duration) string {
	if remaining < 0 {
		return ErrNotObtained.Error() + ": held by another owner"
	}
	return fmt.Sprintf("%s: held by another owner for %v more", ErrNotObtained, remaining)
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}
