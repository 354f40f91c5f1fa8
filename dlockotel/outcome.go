package dlockotel

import (
	"context"
	"errors"

	"github.com/dlock-go/dlock"
)

// The values of AttrOutcome (and of AttrErrorType when the acquisition failed).
const (
	OutcomeAcquired    = "acquired"    // a lease was returned
	OutcomeBusy        = "busy"        // held by another owner (dlock.ErrNotObtained)
	OutcomeTimeout     = "timeout"     // the context's deadline or WithWait ended the wait
	OutcomeCanceled    = "canceled"    // the context was cancelled
	OutcomeUnavailable = "unavailable" // the backend failed (dlock.ErrUnavailable, or another error)
	OutcomeRefused     = "refused"     // the backend refused the request (dlock.ErrRefused)
	OutcomeInvalid     = "invalid"     // bad input (dlock.ErrInvalid, dlock.ErrConflict)
)

// Outcome classifies an acquisition's error (dlock.AcquireEndEvent.Err) as the
// value of AttrOutcome.
func Outcome(err error) string {
	switch {
	case err == nil:
		return OutcomeAcquired
	case errors.Is(err, dlock.ErrInvalid), errors.Is(err, dlock.ErrConflict):
		return OutcomeInvalid
	case errors.Is(err, dlock.ErrRefused):
		return OutcomeRefused
	case errors.Is(err, context.Canceled):
		return OutcomeCanceled
	case errors.Is(err, context.DeadlineExceeded):
		return OutcomeTimeout
	case errors.Is(err, dlock.ErrNotObtained):
		return OutcomeBusy
	}
	return OutcomeUnavailable
}

// RenewalOutcome classifies a renewal's error (dlock.RenewalEvent.Err) as the
// value of AttrRenewalOutcome: "ok", "not_held" (the lease is lost) or
// "transient" (retried within the validity).
func RenewalOutcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, dlock.ErrNotHeld):
		return "not_held"
	}
	return "transient"
}

// ReleaseOutcome classifies an Unlock's error (dlock.ReleaseEvent.Err): "ok",
// "not_held" (the lock was already gone or someone else's) or "error" (the
// backend failed; the lock ends at its TTL).
func ReleaseOutcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, dlock.ErrNotHeld):
		return "not_held"
	}
	return "error"
}

// mode is the value of AttrMode: "try" for one attempt, "wait" for a Lock
// that waits.
func mode(try bool) string {
	if try {
		return "try"
	}
	return "wait"
}
