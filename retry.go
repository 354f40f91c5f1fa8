package dlock

import (
	"math/rand/v2"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// RetryStrategy decides how long a waiting Lock sleeps before its next attempt.
// Implementations must be safe for concurrent use: one strategy serves every call.
type RetryStrategy interface {
	// Backoff returns the delay before attempt number n+1, given that n attempts
	// (n >= 1) have failed. A negative result stops the retries: Lock then returns
	// ErrNotObtained.
	Backoff(n int) time.Duration
}

var defaultRetry = ExponentialBackoff(8*time.Millisecond, 512*time.Millisecond)

type fixed time.Duration

// FixedBackoff waits d between attempts, with no jitter. d must be positive.
func FixedBackoff(d time.Duration) RetryStrategy { return fixed(d) }

func (f fixed) Backoff(int) time.Duration { return time.Duration(f) }

func (f fixed) validate() error {
	if f <= 0 {
		return invalidf("fixed backoff %v must be positive", time.Duration(f))
	}
	return nil
}

type expo struct{ min, max time.Duration }

// ExponentialBackoff waits a random time in [min/2, c] before each attempt, where c
// doubles from min up to max ("full jitter" above a floor, so waiters that failed
// together do not retry in lock step). min must be positive and max >= min.
func ExponentialBackoff(min, max time.Duration) RetryStrategy { return expo{min, max} }

func (e expo) Backoff(n int) time.Duration {
	c := e.max
	if n < 1 {
		n = 1
	}
	if n <= 32 {
		if d := e.min << (n - 1); d > 0 && d < e.max {
			c = d
		}
	}
	lo := e.min / 2
	return lo + rand.N(c-lo+1)
}

func (e expo) validate() error {
	if e.min <= 0 || e.max < e.min {
		return invalidf("exponential backoff needs 0 < min <= max, got %v, %v", e.min, e.max)
	}
	return nil
}

type limit struct {
	s RetryStrategy
	n int
}

// LimitAttempts wraps s so that at most n attempts are made in all (n >= 1).
func LimitAttempts(s RetryStrategy, n int) RetryStrategy { return limit{s, n} }

func (l limit) Backoff(n int) time.Duration {
	if n >= l.n {
		return -1
	}
	return l.s.Backoff(n)
}

func (l limit) validate() error {
	if l.n < 1 {
		return invalidf("attempt limit %d must be at least 1", l.n)
	}
	if l.s == nil {
		return invalidf("nil retry strategy")
	}
	if v, ok := l.s.(interface{ validate() error }); ok {
		return v.validate()
	}
	return nil
}

// ValidateRetry checks a RetryStrategy as WithRetry does, for helpers outside
// this package that take one: nil and the package's strategies built with bad
// arguments are reported as ErrInvalid.
func ValidateRetry(s RetryStrategy) error {
	if driver.IsNil(s) {
		return invalidf("nil retry strategy")
	}
	if v, ok := s.(interface{ validate() error }); ok {
		return v.validate()
	}
	return nil
}
