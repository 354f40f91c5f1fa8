// Package holder is the holder record the dlock command's "run" stores with
// its lock as metadata (dlock.WithMetadata): who holds the lock (host, process,
// user), since when, and why. The command's status and list, and the
// dashboard, read it back from the same definition, and show holder-supplied
// text only through Printable.
package holder

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Record is the metadata "dlock run" writes with its lock, as JSON. Since is
// when the run began to wait for the lock; AcquiredAt refines it with the
// fencing token.
type Record struct {
	Host        string    `json:"host,omitempty"`
	PID         int       `json:"pid,omitempty"`
	User        string    `json:"user,omitempty"`
	Since       time.Time `json:"since"`
	Description string    `json:"description,omitempty"`
}

// Encode returns r as the metadata text dlock run stores.
func (r Record) Encode() string {
	js, err := json.Marshal(r)
	if err != nil {
		// A Record has strings, an int and a time: only a time outside the
		// years 0 to 9999 fails, and no clock reads one.
		panic(fmt.Sprintf("holder: encoding %+v: %v", r, err))
	}
	return string(js)
}

// Parse reads metadata written as dlock run writes it: a JSON object with a
// since time. It returns nil for any other metadata (a holder's own text, an
// empty string), which is then shown as it is.
func Parse(raw string) *Record {
	if !strings.HasPrefix(raw, "{") {
		return nil
	}
	var r Record
	if json.Unmarshal([]byte(raw), &r) != nil || r.Since.IsZero() {
		return nil
	}
	return &r
}

// AcquiredAt returns when the lock was acquired, as well as r and the fencing
// token tell: the token's time when it is a plausible clock reading of the
// acquisition (no earlier than a minute before r.Since, which the holder wrote
// before it began to wait, and not after now), and r.Since otherwise.
func (r Record) AcquiredAt(token uint64, now time.Time) time.Time {
	if ClockToken(token, now) {
		at := time.UnixMicro(int64(token))
		if !at.Before(r.Since.Add(-time.Minute)) && !at.After(now) {
			return at
		}
	}
	return r.Since
}

// ClockToken reports whether tok looks like a server clock reading in
// microseconds, as the Redis backends' tokens are: within ten years before now
// and a day after.
func ClockToken(tok uint64, now time.Time) bool {
	if tok >= 1<<62 {
		return false
	}
	t := time.UnixMicro(int64(tok))
	return t.After(now.AddDate(-10, 0, 0)) && t.Before(now.Add(24*time.Hour))
}

// Printable returns s with every character a terminal or a page could act on
// written as a Go escape: control characters (\x1b, \n, \t, \u009b), format
// characters such as the bidirectional overrides (\u202e), and bytes that are
// not UTF-8 (\xff). Text without such characters is returned as it is.
func Printable(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return !IsPrintable(r) }) < 0 {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case IsPrintable(r):
			b.WriteRune(r)
		default:
			q := strconv.QuoteRune(r) // '\n', '\x1b', '\u202e'
			b.WriteString(q[1 : len(q)-1])
		}
		i += size
	}
	return b.String()
}

// IsPrintable reports whether r may be shown as it is: a printable character
// other than the replacement character (which also stands for bad UTF-8).
func IsPrintable(r rune) bool { return r != utf8.RuneError && unicode.IsPrint(r) }
