package driver

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

// ValidatePattern checks a List pattern: 1 to MaxKeyLen bytes of valid UTF-8
// without control characters, '{' or '}'. The error matches ErrInvalid.
func ValidatePattern(pattern string) error {
	switch {
	case pattern == "":
		return invalidf("empty pattern")
	case len(pattern) > MaxKeyLen:
		return invalidf("pattern of %d bytes exceeds %d", len(pattern), MaxKeyLen)
	case !utf8.ValidString(pattern):
		return invalidf("pattern %q is not valid UTF-8", pattern)
	}
	for _, r := range pattern {
		if unicode.IsControl(r) || r == '{' || r == '}' {
			return invalidf("pattern %q contains %q", pattern, r)
		}
	}
	return nil
}

// MatchKey reports whether key matches the glob pattern, as backends' List
// methods read it: '*' matches any run of characters, '?' any one character,
// "[abc]" and "[a-z]" one character of a class ("[^a]" or "[!a]" negated), and
// '\' makes the next character literal. A malformed class matches nothing.
func MatchKey(pattern, key string) bool {
	p, k := []rune(pattern), []rune(key)
	// Backtracking over the last '*' only: linear in practice, and bounded by
	// len(p)*len(k) steps.
	var star, mark = -1, 0
	i, j := 0, 0
	for j < len(k) {
		if i < len(p) {
			switch c := p[i]; c {
			case '*':
				star, mark = i, j
				i++
				continue
			case '?':
				i, j = i+1, j+1
				continue
			case '[':
				if ok, n := matchClass(p[i:], k[j]); n > 0 && ok {
					i, j = i+n, j+1
					continue
				}
			case '\\':
				if i+1 < len(p) && p[i+1] == k[j] {
					i, j = i+2, j+1
					continue
				}
			default:
				if c == k[j] {
					i, j = i+1, j+1
					continue
				}
			}
		}
		if star < 0 {
			return false
		}
		i, mark = star+1, mark+1
		j = mark
	}
	for i < len(p) && p[i] == '*' {
		i++
	}
	return i == len(p)
}

// matchClass matches r against the class at the start of p ("[...]") and returns
// whether it matched and the class's length in runes (0 when malformed).
func matchClass(p []rune, r rune) (bool, int) {
	i := 1
	neg := i < len(p) && (p[i] == '^' || p[i] == '!')
	if neg {
		i++
	}
	matched := false
	for first := true; i < len(p); first = false {
		c := p[i]
		if c == ']' && !first {
			return matched != neg, i + 1
		}
		if c == '\\' && i+1 < len(p) {
			i++
			c = p[i]
		}
		if i+2 < len(p) && p[i+1] == '-' && p[i+2] != ']' {
			if lo, hi := c, p[i+2]; lo <= r && r <= hi {
				matched = true
			}
			i += 3
			continue
		}
		if c == r {
			matched = true
		}
		i++
	}
	return false, 0
}

// MaxKeyLen is the longest lock key or List pattern, in bytes, on every
// backend.
const MaxKeyLen = 1024

// MaxMetadataLen is the longest metadata string (dlock.WithMetadata) accepted,
// in bytes; every backend keeps that many.
const MaxMetadataLen = 4096
