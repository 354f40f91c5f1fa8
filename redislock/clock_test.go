package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/redislock"
)

// The server clock faults of docs/safety.md ("Server clock steps forward",
// "Server clock steps back", "Tokens after lost state") on a real
// redis-server whose wall clock a preloaded library shifts at any moment
// (testserver.ClockShift); its monotonic clock runs on.

// clockServer starts a redis-server with a shiftable clock and returns the
// shift, the server and a client of it.
func clockServer(t *testing.T) (*testserver.ClockShift, *testserver.Redis) {
	t.Helper()
	cs := testserver.NewClockShift(t)
	return cs, testserver.StartRedisEnv(t, cs.Env())
}

// serverClock is the server's wall clock (TIME), in microseconds.
func serverClock(t *testing.T, s *testserver.Redis) int64 {
	t.Helper()
	tm, err := newRDB(t, s.Addr).Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return tm.UnixMicro()
}

// TestTokensUnderServerClockSteps: while a key's state lives (the plain and
// fair locks' record, the semaphore's fence counter), every token is above the
// one before, whatever the server clock does: steps back of ten minutes and
// two hours, forward by three hours, back by a millisecond. A forward step
// draws the clock (the token jumps with it).
func TestTokensUnderServerClockSteps(t *testing.T) {
	cs, s := clockServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kinds := map[string]func() (*redislock.Client, error){
		"plain":     func() (*redislock.Client, error) { return redislock.New(newRDB(t, s.Addr)) },
		"fair":      func() (*redislock.Client, error) { return redislock.NewFair(newRDB(t, s.Addr)) },
		"semaphore": func() (*redislock.Client, error) { return redislock.NewSemaphore(newRDB(t, s.Addr), 2) },
	}
	for name, newc := range kinds {
		t.Run(name, func(t *testing.T) {
			cs.Set(t, 0)
			c, err := newc()
			if err != nil {
				t.Fatal(err)
			}
			key := dlocktest.Key(t)
			var last uint64
			// Each step leaves the record of the last grant alive (its TTL
			// counts on the server clock): a forward step past it is
			// TestTokensPastTheStatedBounds's.
			for _, step := range []time.Duration{0, -10 * time.Minute, -2 * time.Hour, time.Hour, time.Hour - time.Millisecond, time.Hour + 5*time.Second} {
				cs.Set(t, step)
				// A lock held across the step: the plain and fair locks keep
				// their record (and token) while a holding lives.
				l, err := c.TryLock(ctx, key, dlock.WithTTL(time.Hour))
				if err != nil {
					t.Fatalf("clock %v: %v", step, err)
				}
				tok := l.Token()
				if tok <= last {
					t.Errorf("clock %v: token %d, not above %d", step, tok, last)
				}
				if now := serverClock(t, s); step > 0 && int64(tok) < now-int64(time.Minute/time.Microsecond) {
					t.Errorf("clock %v: token %d, below the server clock %d: a forward step is drawn", step, tok, now)
				}
				last = tok
				if err := l.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestTokensPastTheStatedBounds: where docs/safety.md says a token can repeat,
// it does, and only there. The plain lock's record lives until its last
// holding's TTL runs out: after that, a backward step of the server clock
// longer than the time since the last grant draws a smaller token. A restart
// that loses the state, with the clock stepped back across it, does too.
// Within the semaphore's FenceRetention the same step does not.
func TestTokensPastTheStatedBounds(t *testing.T) {
	cs, s := clockServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	plain, err := redislock.New(newRDB(t, s.Addr))
	if err != nil {
		t.Fatal(err)
	}
	sem, err := redislock.NewSemaphore(newRDB(t, s.Addr), 2)
	if err != nil {
		t.Fatal(err)
	}
	grant := func(c *redislock.Client, key string) uint64 {
		t.Helper()
		l, err := c.TryLock(ctx, key, dlock.WithTTL(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		return l.Token()
	}
	key, semKey := dlocktest.Key(t), dlocktest.Key(t)+"sem"
	before, semBefore := grant(plain, key), grant(sem, semKey)
	rdb := newRDB(t, s.Addr)
	testserver.Eventually(t, 5*time.Second, "the plain lock's record gone at its holding's TTL", func() bool {
		return rdb.Exists(ctx, redislock.LockKey(key)).Val() == 0
	})
	cs.Set(t, -time.Hour)
	if after := grant(plain, key); after >= before {
		t.Errorf("plain lock, record gone, clock an hour back: token %d, not below %d (docs/safety.md says it can repeat an older token)", after, before)
	}
	if after := grant(sem, semKey); after <= semBefore {
		t.Errorf("semaphore within FenceRetention, clock an hour back: token %d, not above %d", after, semBefore)
	}
	// A restart that loses every key, the clock still an hour back.
	cs.Set(t, 0)
	last := grant(plain, key)
	cs.Set(t, -time.Hour)
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if after := grant(plain, key); after >= last {
		t.Errorf("restart that lost the state, clock an hour back: token %d, not below %d", after, last)
	}
	// The clock back where it was before the restart: above every earlier token.
	cs.Set(t, 0)
	if after := grant(plain, key); after <= last {
		t.Errorf("restart that lost the state, clock right: token %d, not above %d", after, last)
	}
}

// TestForwardStepExpiresTheLock: a forward step of the server clock past the
// TTL expires a held lock at once ("as an eviction"): another client takes it
// with a larger token, the fence refuses the old holder's writes, and the old
// holder is told at its next renewal.
func TestForwardStepExpiresTheLock(t *testing.T) {
	cs, s := clockServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, err := redislock.New(newRDB(t, s.Addr))
	if err != nil {
		t.Fatal(err)
	}
	b, err := redislock.New(newRDB(t, s.Addr))
	if err != nil {
		t.Fatal(err)
	}
	key := dlocktest.Key(t)
	old, err := a.TryLock(ctx, key, dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryLock(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock of a held lock: %v", err)
	}
	cs.Set(t, time.Minute)
	var next *dlock.Lease
	testserver.Eventually(t, 5*time.Second, "the lock free after the forward step", func() bool {
		next, err = b.TryLock(ctx, key)
		return err == nil
	})
	defer next.Unlock(ctx)
	if next.Token() <= old.Token() {
		t.Errorf("token after the step %d, not above the old holder's %d", next.Token(), old.Token())
	}
	fence, err := redislock.NewFence(newRDB(t, s.Addr))
	if err != nil {
		t.Fatal(err)
	}
	if err := fence.Set(ctx, next, "res:"+key, "new", 0); err != nil {
		t.Fatal(err)
	}
	if err := fence.Set(ctx, old, "res:"+key, "old", 0); !errors.Is(err, dlock.ErrStaleToken) {
		t.Errorf("the old holder's fenced write: %v, want ErrStaleToken", err)
	}
	if err := old.Extend(ctx, 10*time.Second); !errors.Is(err, dlock.ErrLockLost) && !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("the old holder's renewal: %v, want the loss", err)
	}
}
