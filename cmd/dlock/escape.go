package main

import (
	"bytes"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/dlock-go/dlock/internal/holder"
)

// printable returns s with every character a terminal could act on escaped,
// so that holder-supplied text can neither send escape sequences nor forge rows
// and columns (see holder.Printable).
func printable(s string) string { return holder.Printable(s) }

// escapeJSONControls rewrites the characters encoding/json leaves raw but a
// terminal may act on, as \u escapes: DEL, the C1 controls (among them CSI
// U+009B) and the format characters such as the bidirectional overrides.
// Outside strings JSON has only ASCII, so the document stays valid and decodes
// to the same values.
func escapeJSONControls(js []byte) []byte {
	raw := func(r rune) bool { return r >= 0x7f && !holder.IsPrintable(r) && r != utf8.RuneError }
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
