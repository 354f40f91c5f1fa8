// Package glob checks and matches the lock-name patterns of the backends' List:
// the glob syntax Redis uses in SCAN MATCH, so that every backend lists the same
// names for the same pattern.
package glob

import (
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/dlock-go/dlock"
)

// Validate checks a pattern: 1 to dlock.MaxKeyLen bytes of valid UTF-8 without
// control characters, '{' or '}'. The error matches dlock.ErrInvalid.
func Validate(pattern string) error {
	switch {
	case pattern == "":
		return fmt.Errorf("%w: empty pattern", dlock.ErrInvalid)
	case len(pattern) > dlock.MaxKeyLen:
		return fmt.Errorf("%w: pattern of %d bytes exceeds %d", dlock.ErrInvalid, len(pattern), dlock.MaxKeyLen)
	case !utf8.ValidString(pattern):
		return fmt.Errorf("%w: pattern %q is not valid UTF-8", dlock.ErrInvalid, pattern)
	}
	for _, r := range pattern {
		if unicode.IsControl(r) || r == '{' || r == '}' {
			return fmt.Errorf("%w: pattern %q contains %q", dlock.ErrInvalid, pattern, r)
		}
	}
	return nil
}

// Match reports whether name matches pattern: '*' matches any run of characters
// ('/' included), '?' any one character, "[...]" one character of a set with
// ranges ("[^...]" one not in it), and '\' makes the next character literal. A
// '[' that is never closed is a literal '['.
func Match(pattern, name string) bool {
	// Iterative matching with one backtrack point: the last '*' seen.
	starP, starN := -1, 0
	p, n := 0, 0
	for n < len(name) {
		r, w := utf8.DecodeRuneInString(name[n:])
		if p < len(pattern) {
			switch pattern[p] {
			case '*':
				starP, starN = p, n
				p++
				continue
			case '?':
				p, n = p+1, n+w
				continue
			case '[':
				if in, width, ok := set(pattern[p:], r); ok {
					if in {
						p, n = p+width, n+w
						continue
					}
					break
				}
				fallthrough
			default:
				if pr, pw := literal(pattern[p:]); pr == r {
					p, n = p+pw, n+w
					continue
				}
			}
		}
		if starP < 0 {
			return false
		}
		// Let the last '*' swallow one more character, and go on from there.
		_, sw := utf8.DecodeRuneInString(name[starN:])
		starN += sw
		p, n = starP+1, starN
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// literal returns the character at the start of p, which must not be empty, and
// its width in p, honouring a '\' escape.
func literal(p string) (rune, int) {
	if p[0] == '\\' && len(p) > 1 {
		r, w := utf8.DecodeRuneInString(p[1:])
		return r, w + 1
	}
	return utf8.DecodeRuneInString(p)
}

// set matches r against the set that opens p (p[0] is '['). It returns whether r
// is in the set and the set's width in p; ok is false when the set is not closed.
func set(p string, r rune) (in bool, width int, ok bool) {
	i := 1
	negate := i < len(p) && p[i] == '^'
	if negate {
		i++
	}
	for first := true; i < len(p); first = false {
		if p[i] == ']' && !first {
			return in != negate, i + 1, true
		}
		lo, w := literal(p[i:])
		i += w
		hi := lo
		if i+1 < len(p) && p[i] == '-' && p[i+1] != ']' {
			hi, w = literal(p[i+1:])
			i += 1 + w
		}
		if lo > hi {
			lo, hi = hi, lo
		}
		if lo <= r && r <= hi {
			in = true
		}
	}
	return false, 0, false
}
