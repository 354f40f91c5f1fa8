package legacy

import "time"

// Stamp bounds: a value outside them is not a timestamp in the Format's unit
// (a seconds stamp read as milliseconds would be from 1973, a milliseconds stamp
// read as seconds from the year 5138), so it is reported as dlock.ErrConflict
// instead of being taken over or waited on.
const (
	minMillis  = 100_000_000_000     // 1973-03-03 in ms
	maxStamp   = 999_999_999_999_999 // 15 digits: exact in a Lua number
	maxSeconds = minMillis - 1
)

// Format describes the lock key and value format the fleet's clients use. The
// zero Format is the Java recipes': the key as given, stamps in milliseconds,
// no real expiry, the local clock.
type Format struct {
	// Key maps a dlock key to the Redis key the fleet locks, for example
	// Prefix("lock.") for "lock.foo" or Suffix("_lock") for "foo_lock". nil uses
	// the key as it is.
	Key func(key string) string

	// Unit is the unit of the stamps: time.Millisecond (the default when zero) or
	// time.Second. Any other value is dlock.ErrInvalid.
	Unit time.Duration

	// Expire also gives every key dlock writes a real expiry (PEXPIRE), one unit
	// after its stamp runs out, as a safety net: a key left by a crashed holder
	// then disappears on its own. Old clients do not need it and GETSET clears it.
	// The default is false, as in the Java recipes.
	Expire bool

	// Clock is the clock stamps are computed from. nil means time.Now, the local
	// clock, as the fleet's clients do.
	Clock func() time.Time

	// ServerClock computes stamps from the Redis server clock (TIME) instead of a
	// local one. It cannot be combined with Clock.
	ServerClock bool
}

// Prefix returns a Format.Key function that puts p before the key ("lock." + key).
func Prefix(p string) func(string) string { return func(k string) string { return p + k } }

// Suffix returns a Format.Key function that puts s after the key (key + "_lock").
func Suffix(s string) func(string) string { return func(k string) string { return k + s } }
