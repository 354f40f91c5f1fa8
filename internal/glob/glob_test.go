package glob

import (
	"errors"
	"strings"
	"testing"

	"github.com/dlock-go/dlock"
)

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"*", "", true},
		{"*", "anything/at:all", true},
		{"orders:*", "orders:42", true},
		{"orders:*", "order:42", false},
		{"a*b*c", "a-x-b-y-c", true},
		{"a*b*c", "a-x-b-y-d", false},
		{"a*c", "abcbc", true},
		{"a**", "a", true},
		{"job-?", "job-1", true},
		{"job-?", "job-12", false},
		{"job-?", "job-é", true},
		{"[ab]x", "bx", true},
		{"[ab]x", "cx", false},
		{"[^ab]x", "cx", true},
		{"[^ab]x", "ax", false},
		{"[a-c]", "b", true},
		{"[c-a]", "b", true},
		{"[a-c]", "d", false},
		{"[]]", "]", true},
		{"[ab", "[ab", true},
		{"[ab", "a", false},
		{`[\]]`, "]", true},
		{`\*`, "*", true},
		{`\*`, "a", false},
		{`a\?`, "a?", true},
		{"a", "ab", false},
		{"ab", "a", false},
		{"", "", true},
	} {
		if got := Match(tc.pattern, tc.name); got != tc.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, bad := range []string{"", "a{", "b}", "x\x00", "bad\xff", strings.Repeat("p", dlock.MaxKeyLen+1)} {
		if err := Validate(bad); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("Validate(%q): %v, want ErrInvalid", bad, err)
		}
	}
	for _, good := range []string{"*", "orders:*", "[ab", "job-?"} {
		if err := Validate(good); err != nil {
			t.Errorf("Validate(%q): %v", good, err)
		}
	}
}
