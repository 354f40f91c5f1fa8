package dashboard

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Printable returns s with every character a terminal or a page could act on
// written as a Go escape: control characters (\x1b, \n, \t, \u009b), format
// characters such as the bidirectional overrides (\u202e), and bytes that are
// not UTF-8 (\xff). Holder-supplied text (descriptions, metadata, host and user
// names) goes through it before it is shown, so that it can neither send escape
// sequences nor forge rows and columns. Text without such characters is
// returned as it is.
func Printable(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return !isPrintable(r) }) < 0 {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case isPrintable(r):
			b.WriteRune(r)
		default:
			q := strconv.QuoteRune(r) // '\n', '\x1b', '\u202e'
			b.WriteString(q[1 : len(q)-1])
		}
		i += size
	}
	return b.String()
}

func isPrintable(r rune) bool { return r != utf8.RuneError && unicode.IsPrint(r) }
