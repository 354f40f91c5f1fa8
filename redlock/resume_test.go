package redlock_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// TestResumeNeedsAMajority: a detached holding that a minority of the masters
// lost resumes with its token on the rest, and its renewals tell it lost once
// a majority lost it; a holding a majority lost resumes nowhere, and the next
// holder's token is above it.
func TestResumeNeedsAMajority(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := dlocktest.Key(t)
	a, b := newClient(t), newClient(t)
	l, err := a.TryLock(ctx, key, dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// Every master holds it (the attempts on their way when the majority
	// granted have landed); those of the majority that granted it first
	// carry its token, the others the token each drew.
	testserver.Eventually(t, 5*time.Second, "every master holding the lock", func() bool {
		return len(held(t, key, 0, 1, 2, 3, 4)) == len(srvs)
	})
	ref, err := l.Detach()
	if err != nil {
		t.Fatal(err)
	}
	drop := func(i int) {
		if err := newRDB(t, srvs[i].Addr).Del(ctx, redislock.LockKey(key)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	var with, without []int
	for i := range srvs {
		if recordToken(t, i, key) == l.Token() {
			with = append(with, i)
		} else {
			without = append(without, i)
		}
	}
	if len(with) < 3 {
		t.Fatalf("the token %d on masters %v only", l.Token(), with)
	}
	// A minority lost: two masters, of those without its token first.
	lost := append(without, with...)[:2]
	drop(lost[0])
	drop(lost[1])
	with = slices.DeleteFunc(with, func(i int) bool { return slices.Contains(lost, i) })
	r, err := b.Resume(ctx, ref, dlock.WithAutoRenew(true))
	if err != nil {
		t.Fatalf("Resume with 3 of 5 masters holding: %v", err)
	}
	if r.Token() != l.Token() {
		t.Fatalf("resumed token %d, want %d", r.Token(), l.Token())
	}
	// The token lost on a majority: renewals go on only where the owner
	// holds it, on fewer than three masters.
	for _, i := range with[:len(with)-2] {
		drop(i)
	}
	select {
	case <-r.Done():
	case <-time.After(3 * time.Second):
		t.Fatal("a resumed holding a majority lost was not told within 3 s")
	}
	if !errors.Is(r.Err(), dlock.ErrLockLost) {
		t.Fatalf("Err of a resumed holding a majority lost: %v, want ErrLockLost", r.Err())
	}
	if _, err := b.Resume(ctx, ref); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Resume with 2 masters holding: %v, want ErrNotHeld", err)
	}
	n, err := a.TryLock(ctx, key, dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatalf("TryLock with the old holding on 2 masters: %v", err)
	}
	defer n.Unlock(ctx)
	if n.Token() <= l.Token() {
		t.Fatalf("next token %d not above the resumed holding's %d", n.Token(), l.Token())
	}
}

// recordToken returns the token of key's lock record on master i (0: none).
func recordToken(t testing.TB, i int, key string) uint64 {
	t.Helper()
	v, err := newRDB(t, srvs[i].Addr).Get(context.Background(), redislock.LockKey(key)).Result()
	if errors.Is(err, redis.Nil) {
		return 0
	}
	if err != nil {
		t.Fatalf("node %d: %v", i, err)
	}
	// "-" or "+", the token in base 36, then "~delay" or " owner".
	tok := strings.TrimLeft(v, "-+")
	if j := strings.IndexAny(tok, "~ "); j >= 0 {
		tok = tok[:j]
	}
	n, err := strconv.ParseUint(tok, 36, 64)
	if err != nil {
		t.Fatalf("node %d: record %q: %v", i, v, err)
	}
	return n
}
