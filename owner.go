package dlock

import (
	"crypto/rand"
	"encoding/hex"
	"strings"

	"github.com/dlock-go/dlock/driver"
)

// WithOwner makes the acquisitions of a Client (or of one call) act for the
// caller's owner ID instead of an anonymous one. The owner token a Driver
// receives is then id, OwnerSep and a random part that is new for every TryLock or
// Lock call and the same for all attempts of one call, so a Driver can tell the
// holder (the ID, see SplitOwner) from the acquisition. A plain mutex ignores
// the ID (every acquisition is a different owner); a reentrant lock (such as
// redislock.NewReentrant) lets acquisitions with the same ID re-enter: processes
// that share an ID hold the lock together.
//
// id must be 1 to driver.MaxOwnerLen bytes of ASCII letters, digits and "-_.:@" (a
// host name, a pod name, "host:pid"...), characters that every backend can keep
// in an owner token; anything else is reported as ErrInvalid. The default is
// none: every acquisition is its own owner.
func WithOwner(id string) Option {
	return func(c *config) {
		if err := validateOwner(id); err != nil {
			c.setErr(err)
			return
		}
		c.owner = id
	}
}

func validateOwner(id string) error {
	if id == "" {
		return invalidf("empty owner ID")
	}
	if len(id) > driver.MaxOwnerLen {
		return invalidf("owner ID of %d bytes exceeds %d", len(id), driver.MaxOwnerLen)
	}
	for i := 0; i < len(id); i++ {
		if b := id[i]; !ownerByte(b) {
			return invalidf("owner ID %q contains %q (ASCII letters, digits and -_.:@ only)", id, rune(b))
		}
	}
	return nil
}

func ownerByte(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || strings.IndexByte("-_.:@", b) >= 0
}

// newOwner returns the owner token of a new acquisition: a fresh random token,
// after the WithOwner ID and OwnerSep when one is set.
func (c *config) newOwner() string {
	if c.owner == "" {
		return newOwner()
	}
	return c.owner + driver.OwnerSep + newOwner()
}

// newOwner returns a fresh owner token: 128 random bits, hex encoded.
func newOwner() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
