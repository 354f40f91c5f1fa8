package main

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// printable returns s with every character a terminal could act on written as
// a Go escape: control characters (\x1b, \n, \t, \u009b), format characters
// such as the bidirectional overrides (\u202e), and bytes that are not UTF-8
// (\xff). Holder-supplied text (descriptions, metadata, host and user names)
// goes through it before it reaches a terminal, so that it can neither send
// escape sequences nor forge rows and columns.
func printable(s string) string {
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

// escapeJSONControls rewrites the characters encoding/json leaves raw but a
// terminal may act on, as \u escapes: DEL, the C1 controls (among them CSI
// U+009B) and the format characters such as the bidirectional overrides.
// Outside strings JSON has only ASCII, so the document stays valid and decodes
// to the same values.
func escapeJSONControls(js []byte) []byte {
	raw := func(r rune) bool { return r >= 0x7f && !isPrintable(r) && r != utf8.RuneError }
	if !bytes.ContainsFunc(js, raw) {
		return js
	}
	var b bytes.Buffer
	for _, r := range string(js) {
		switch {
		case !raw(r):
			b.WriteRune(r)
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&b, `\u%04x\u%04x`, r1, r2)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.Bytes()
}
