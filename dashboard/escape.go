package dashboard

import "github.com/dlock-go/dlock/internal/holder"

// Printable returns s with every character a terminal or a page could act on
// written as a Go escape: control characters (\x1b, \n, \t, \u009b), format
// characters such as the bidirectional overrides (\u202e), and bytes that are
// not UTF-8 (\xff). Holder-supplied text (descriptions, metadata, host and user
// names) goes through it before it is shown, so that it can neither send escape
// sequences nor forge rows and columns. Text without such characters is
// returned as it is.
func Printable(s string) string { return holder.Printable(s) }
