package holder_test

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/holder"
)

func TestEncodeParseRoundTrip(t *testing.T) {
	since := time.Date(2026, 3, 4, 5, 6, 7, 8000, time.UTC)
	r := holder.Record{Host: "web-1", PID: 4242, User: "ops", Since: since, Description: "nightly report"}
	raw := r.Encode()
	want := `{"host":"web-1","pid":4242,"user":"ops","since":"2026-03-04T05:06:07.000008Z","description":"nightly report"}`
	if raw != want {
		t.Fatalf("Encode = %s, want %s", raw, want)
	}
	got := holder.Parse(raw)
	if got == nil || *got != r {
		t.Fatalf("Parse(Encode) = %+v, want %+v", got, r)
	}
	// Empty fields are left out, and read back as empty.
	bare := holder.Record{Since: since}.Encode()
	if bare != `{"since":"2026-03-04T05:06:07.000008Z"}` {
		t.Errorf("Encode of a bare record = %s", bare)
	}
	if got := holder.Parse(bare); got == nil || got.Host != "" || got.PID != 0 || !got.Since.Equal(since) {
		t.Errorf("Parse(%s) = %+v", bare, got)
	}
}

func TestParseForeignMetadata(t *testing.T) {
	for _, raw := range []string{
		"", "job 7", "null", `"text"`, "[1,2]", " {}",
		`{}`,                          // no since: not written by dlock run
		`{"host":"h","pid":1}`,        // likewise
		`{"since":"yesterday"}`,       // not a time
		`{"pid":"seven","since":"x"}`, // wrong types
		`{"host":"h","since":`,        // cut short
	} {
		if got := holder.Parse(raw); got != nil {
			t.Errorf("Parse(%q) = %+v, want nil", raw, got)
		}
	}
}

func TestAcquiredAt(t *testing.T) {
	now := time.Now()
	since := now.Add(-10 * time.Second).Truncate(time.Microsecond)
	r := holder.Record{Since: since}
	acquired := since.Add(3 * time.Second)
	for _, tc := range []struct {
		name  string
		token uint64
		want  time.Time
	}{
		{"clock token", uint64(acquired.UnixMicro()), acquired},
		{"counter token", 42, since},
		{"token before since", uint64(since.Add(-2 * time.Minute).UnixMicro()), since},
		{"token after now", uint64(now.Add(time.Hour).UnixMicro()), since},
		{"huge token", 1 << 63, since},
	} {
		if got := r.AcquiredAt(tc.token, now); !got.Equal(tc.want) {
			t.Errorf("%s: AcquiredAt(%d) = %v, want %v", tc.name, tc.token, got, tc.want)
		}
	}
}

func TestClockToken(t *testing.T) {
	now := time.Now()
	for tok, want := range map[uint64]bool{
		0: false, 1: false, 42: false, 1 << 62: false, 1<<64 - 1: false,
		uint64(now.UnixMicro()):                     true,
		uint64(now.AddDate(-9, 0, 0).UnixMicro()):   true,
		uint64(now.AddDate(-11, 0, 0).UnixMicro()):  false,
		uint64(now.Add(23 * time.Hour).UnixMicro()): true,
		uint64(now.Add(25 * time.Hour).UnixMicro()): false,
	} {
		if got := holder.ClockToken(tok, now); got != want {
			t.Errorf("ClockToken(%d) = %v, want %v", tok, got, want)
		}
	}
}

func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"":                      "",
		"plain text, ünïcode":   "plain text, ünïcode",
		"a\x1b[31mb\nc\td":      `a\x1b[31mb\nc\td`,
		"csi\u009b rlo\u202e":   `csi\u009b rlo\u202e`,
		"bad \xff utf8":         `bad \xff utf8`,
		"tag \U000e0041 astral": `tag \U000e0041 astral`,
		"replacement \ufffd":    "replacement \ufffd", // stands as it is: it was valid UTF-8
	} {
		if got := holder.Printable(in); got != want {
			t.Errorf("Printable(%q) = %q, want %q", in, got, want)
		}
	}
	for r, want := range map[rune]bool{'a': true, 'ü': true, ' ': true, '\n': false, 0x1b: false, 0x9b: false, 0x202e: false, 0xfffd: false} {
		if got := holder.IsPrintable(r); got != want {
			t.Errorf("IsPrintable(%U) = %v, want %v", r, got, want)
		}
	}
}
