package redlock_test

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/redislock"
)

// TestOneServerUnderTwoNamesIsRefused: one server listed as 127.0.0.1:P and as
// localhost:P would count twice, a majority of three out of one real server.
// The first acquisition finds out (the servers' run_ids) and fails with
// ErrInvalid naming both addresses, leaving no lock on any server, and so does
// every later one; three distinct servers, named either way, lock as usual.
func TestOneServerUnderTwoNamesIsRefused(t *testing.T) {
	a := addrs()
	_, port, err := net.SplitHostPort(a[0])
	if err != nil {
		t.Fatal(err)
	}
	alias := net.JoinHostPort("localhost", port)
	ctx := ctxT(t, 20*time.Second)
	for _, at := range [][]string{{a[0], alias, a[1]}, {a[1], a[0], alias}} {
		c := newClientAt(t, at, nil)
		key := dlocktest.Key(t)
		for try := range 2 {
			l, err := c.TryLock(ctx, key, dlock.WithTTL(5*time.Second))
			if err == nil {
				_ = l.Unlock(ctx)
				t.Fatalf("nodes %v: try %d locked with one server counted twice", at, try)
			}
			if !errors.Is(err, dlock.ErrInvalid) || !strings.Contains(err.Error(), a[0]) || !strings.Contains(err.Error(), alias) {
				t.Fatalf("nodes %v: try %d: %v, want ErrInvalid naming %s and %s", at, try, err, a[0], alias)
			}
			if try == 0 {
				t.Logf("nodes %v: %v", at, err)
			}
		}
		if _, err := c.Lock(ctx, key, dlock.WithTTL(5*time.Second)); !errors.Is(err, dlock.ErrInvalid) {
			t.Fatalf("nodes %v: Lock: %v, want ErrInvalid", at, err)
		}
		for _, addr := range a[:2] {
			if n := newRDB(t, addr).Exists(ctx, redislock.LockKey(key)).Val(); n != 0 {
				t.Errorf("nodes %v: the lock is left on %s", at, addr)
			}
		}
	}

	// Three distinct servers, one of them under its host name.
	c := newClientAt(t, []string{alias, a[1], a[2]}, nil)
	l, err := c.TryLock(ctx, dlocktest.Key(t), dlock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatalf("three distinct servers: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
