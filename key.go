package dlock

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// ValidateKey checks a lock key against the rules every backend shares: 1 to
// MaxKeyLen bytes of valid UTF-8, not only white space, no control characters, and
// no '{' or '}' (reserved for Redis Cluster hash tags, which dlock adds itself so
// that a lock's companion keys stay in one slot). The error matches ErrInvalid.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return invalidf("empty key")
	case len(key) > MaxKeyLen:
		return invalidf("key of %d bytes exceeds %d", len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return invalidf("key %q is not valid UTF-8", key)
	case strings.TrimSpace(key) == "":
		return invalidf("key %q is only white space", key)
	}
	for _, r := range key {
		if unicode.IsControl(r) {
			return invalidf("key %q contains control character %U", key, r)
		}
		if r == '{' || r == '}' {
			return invalidf("key %q contains %q (reserved for hash tags)", key, r)
		}
	}
	return nil
}
