package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
)

func TestValidateKey(t *testing.T) {
	good := []string{"a", "orders:42", "ключ", "with space", "x:fence", strings.Repeat("k", driver.MaxKeyLen)}
	for _, k := range good {
		if err := driver.ValidateKey(k); err != nil {
			t.Errorf("ValidateKey(%q): %v", k, err)
		}
	}
	bad := []string{"", " ", "\t", "a\nb", "a\x00", "\x7f", "a\u0085b", "\xff", "{a}", "a}", strings.Repeat("k", driver.MaxKeyLen+1)}
	for _, k := range bad {
		if err := driver.ValidateKey(k); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("ValidateKey(%q): %v, want ErrInvalid", k, err)
		}
	}
}

func FuzzValidateKey(f *testing.F) {
	for _, s := range []string{"a", "", "{x}", "\xff", "a b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, k string) {
		err := driver.ValidateKey(k)
		if err != nil && !errors.Is(err, dlock.ErrInvalid) {
			t.Fatalf("untyped error %v", err)
		}
		if err == nil && (k == "" || strings.ContainsAny(k, "{}\x00") || len(k) > driver.MaxKeyLen) {
			t.Fatalf("accepted %q", k)
		}
	})
}

func TestNormalizeTTL(t *testing.T) {
	cases := []struct {
		in, want time.Duration
		ok       bool
	}{
		{0, 0, false},
		{-time.Second, 0, false},
		{500 * time.Microsecond, 0, false},
		{dlock.MinTTL, dlock.MinTTL, true},
		{5*time.Millisecond + 1, 6 * time.Millisecond, true},
		{1500 * time.Millisecond, 1500 * time.Millisecond, true},
		{dlock.MaxTTL, dlock.MaxTTL, true},
		{dlock.MaxTTL + time.Millisecond, 0, false},
	}
	for _, c := range cases {
		got, err := driver.NormalizeTTL(c.in)
		if c.ok != (err == nil) || got != c.want {
			t.Errorf("NormalizeTTL(%v) = %v, %v; want %v ok=%v", c.in, got, err, c.want, c.ok)
		}
		if err != nil && !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("NormalizeTTL(%v): untyped error %v", c.in, err)
		}
	}
}

func TestBackoff(t *testing.T) {
	f := dlock.FixedBackoff(3 * time.Millisecond)
	for n := 1; n < 5; n++ {
		if d := f.Backoff(n); d != 3*time.Millisecond {
			t.Errorf("fixed Backoff(%d) = %v", n, d)
		}
	}
	e := dlock.ExponentialBackoff(4*time.Millisecond, 64*time.Millisecond)
	for n := 1; n < 100; n++ {
		hi := min(4*time.Millisecond<<min(n-1, 20), 64*time.Millisecond)
		for i := 0; i < 50; i++ {
			if d := e.Backoff(n); d < 2*time.Millisecond || d > hi {
				t.Fatalf("exponential Backoff(%d) = %v outside [2ms, %v]", n, d, hi)
			}
		}
	}
	l := dlock.LimitAttempts(f, 3)
	if l.Backoff(1) <= 0 || l.Backoff(2) <= 0 || l.Backoff(3) >= 0 {
		t.Errorf("LimitAttempts(3): %v %v %v", l.Backoff(1), l.Backoff(2), l.Backoff(3))
	}
}

func TestNewClientRejectsNilDriver(t *testing.T) {
	if _, err := dlock.NewClient(nil); !errors.Is(err, dlock.ErrInvalid) {
		t.Fatalf("NewClient(nil): %v", err)
	}
}

func TestErrorsMatch(t *testing.T) {
	if !errors.Is(dlock.ErrLockLost, dlock.ErrNotHeld) {
		t.Error("ErrLockLost does not match ErrNotHeld")
	}
	if !errors.Is(&dlock.BusyError{Remaining: time.Second}, dlock.ErrNotObtained) {
		t.Error("BusyError does not match ErrNotObtained")
	}
}

// A zero Lease (new(dlock.Lease)) behaves like a nil *Lease: no panic, no
// deadlock on a second call, ErrNotHeld everywhere, a cancelled Context.
func TestZeroLeaseIsNotHeld(t *testing.T) {
	for name, l := range map[string]*dlock.Lease{"nil": nil, "zero": new(dlock.Lease)} {
		for range 2 {
			ctx := context.Background()
			if l.Key() != "" || l.Owner() != "" || l.Token() != 0 || !l.Deadline().IsZero() {
				t.Errorf("%s: Key/Owner/Token/Deadline not zero", name)
			}
			select {
			case <-l.Done():
			default:
				t.Errorf("%s: Done not closed", name)
			}
			if c := l.Context(); c == nil || !errors.Is(context.Cause(c), dlock.ErrNotHeld) {
				t.Errorf("%s: Context %v", name, c)
			}
			if err := l.Err(); !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("%s: Err %v", name, err)
			}
			if err := l.Extend(ctx, time.Second); !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("%s: Extend %v", name, err)
			}
			if _, err := l.TTL(ctx); !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("%s: TTL %v", name, err)
			}
			if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("%s: Unlock %v", name, err)
			}
		}
	}
}

func TestMatchKey(t *testing.T) {
	cases := []struct {
		p, k string
		ok   bool
	}{
		{"*", "anything", true}, {"*", "", true}, {"jobs:*", "jobs:1", true}, {"jobs:*", "job:1", false},
		{"a?c", "abc", true}, {"a?c", "ac", false}, {"*:fence", "x:fence", true}, {"a*b*c", "aXbYc", true},
		{"a*b*c", "aXbY", false}, {"[ab]x", "bx", true}, {"[ab]x", "cx", false}, {"[^ab]x", "cx", true},
		{"[a-c]1", "b1", true}, {"[a-c]1", "d1", false}, {`\*`, "*", true}, {`\*`, "a", false},
		{"[ab", "a", false}, {"ключ*", "ключ:1", true}, {"a/*", "a/b/c", true},
	}
	for _, c := range cases {
		if got := driver.MatchKey(c.p, c.k); got != c.ok {
			t.Errorf("MatchKey(%q, %q) = %v, want %v", c.p, c.k, got, c.ok)
		}
	}
}
