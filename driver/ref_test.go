package driver_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
)

func TestRefRoundTrip(t *testing.T) {
	for _, r := range []driver.Ref{
		{Backend: "redislock", Kind: driver.KindMutex, Key: "jobs:42", Owner: strings.Repeat("a", 32), Token: 1, TTL: 15 * time.Second},
		{Backend: "pglock", Kind: driver.KindFair, Key: "k é/x", Owner: strings.Repeat("w", driver.MaxOwnerLen) + driver.OwnerSep + strings.Repeat("b", 32),
			Token: 1<<63 + 5, TTL: time.Millisecond, Delay: time.Minute, Fixed: true},
	} {
		s := r.String()
		if strings.ContainsAny(s, " \n\t'\"$`\\") {
			t.Errorf("reference %q is not one shell word", s)
		}
		got, err := driver.ParseRef(s)
		if err != nil || got != r {
			t.Errorf("ParseRef(%v.String()) = %+v, %v", r, got, err)
		}
	}
}

func TestParseRefRefusesWhatIsNoReference(t *testing.T) {
	good := driver.Ref{Backend: "memlock", Kind: driver.KindMutex, Key: "k", Owner: "o", Token: 7, TTL: time.Second}.String()
	for name, s := range map[string]string{
		"empty":        "",
		"prefix only":  driver.RefPrefix,
		"other format": strings.Replace(good, driver.RefPrefix, "dlock2.", 1),
		"truncated":    good[:len(good)-3],
		"padded":       good + "==",
		"no token":     driver.Ref{Backend: "memlock", Kind: driver.KindMutex, Key: "k", Owner: "o", TTL: time.Second}.String(),
		"no owner":     driver.Ref{Backend: "memlock", Kind: driver.KindMutex, Key: "k", Token: 7, TTL: time.Second}.String(),
		"no ttl":       driver.Ref{Backend: "memlock", Kind: driver.KindMutex, Key: "k", Owner: "o", Token: 7}.String(),
		"no backend":   driver.Ref{Kind: driver.KindMutex, Key: "k", Owner: "o", Token: 7, TTL: time.Second}.String(),
		"bad key":      driver.Ref{Backend: "memlock", Kind: driver.KindMutex, Owner: "o", Token: 7, TTL: time.Second}.String(),
		"huge":         driver.RefPrefix + strings.Repeat("A", 10000),
	} {
		if _, err := driver.ParseRef(s); !errors.Is(err, driver.ErrInvalid) {
			t.Errorf("ParseRef of a reference %s: %v, want ErrInvalid", name, err)
		}
	}
}
