package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"
)

func newOptimistic(t testing.TB) *redislock.Optimistic {
	o, err := redislock.NewOptimistic(newRDB(t, srv.Addr), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func incr(cur redislock.Versioned) (string, error) {
	n := 0
	if cur.Value != "" {
		var err error
		if n, err = strconv.Atoi(cur.Value); err != nil {
			return "", err
		}
	}
	return strconv.Itoa(n + 1), nil
}

// Clients incrementing one counter at once lose no update: the final value and
// version are the number of increments.
func TestOptimisticNoLostUpdate(t *testing.T) {
	const clients, rounds = 6, 25
	key := dlocktest.Key(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	retry := dlock.ExponentialBackoff(time.Millisecond, 8*time.Millisecond) // unlimited
	g, gctx := errgroup.WithContext(ctx)
	for i := 0; i < clients; i++ {
		o := newOptimistic(t)
		g.Go(func() error {
			for r := 0; r < rounds; r++ {
				if _, err := o.Update(gctx, key, incr, retry); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	v, err := newOptimistic(t).Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if want := clients * rounds; v.Value != strconv.Itoa(want) || v.Version == 0 {
		t.Fatalf("final %+v, want value %d", v, want)
	}
	if ttl := newRDB(t, srv.Addr).PTTL(ctx, redislock.ValueKey(key)).Val(); ttl <= 0 || ttl > time.Minute {
		t.Errorf("value TTL %v, want (0, 1m]", ttl)
	}
}

func TestOptimisticCompareAndSet(t *testing.T) {
	ctx := context.Background()
	key := dlocktest.Key(t)
	o := newOptimistic(t)
	if v, err := o.Get(ctx, key); err != nil || v != (redislock.Versioned{}) {
		t.Fatalf("Get of a missing value: %+v %v", v, err)
	}
	n1, err := o.CompareAndSet(ctx, key, 0, "a")
	if err != nil || n1 == 0 {
		t.Fatalf("first write: %d %v", n1, err)
	}
	_, err = o.CompareAndSet(ctx, key, 0, "b")
	var ve *redislock.VersionError
	if !errors.Is(err, redislock.ErrVersionConflict) || !errors.Is(err, dlock.ErrConflict) ||
		!errors.As(err, &ve) || ve.Current != n1 || ve.Expected != 0 {
		t.Fatalf("stale write: %v", err)
	}
	n2, err := o.CompareAndSet(ctx, key, n1, "")
	if err != nil || n2 <= n1 {
		t.Fatalf("second write: %d after %d, %v", n2, n1, err)
	}
	if v, err := o.Get(ctx, key); err != nil || v != (redislock.Versioned{Value: "", Version: n2}) {
		t.Fatalf("Get: %+v %v", v, err)
	}
	if !errors.Is(redislock.ErrVersionConflict, dlock.ErrConflict) {
		t.Error("ErrVersionConflict does not match dlock.ErrConflict")
	}
}

// A writer that read a value before it was deleted (or expired) cannot write
// over the value written since: versions never repeat for a key (no ABA).
func TestOptimisticVersionsNeverRepeat(t *testing.T) {
	ctx := context.Background()
	rdb := newRDB(t, srv.Addr)
	for _, gone := range []string{"deleted", "expired"} {
		t.Run(gone, func(t *testing.T) {
			key := dlocktest.Key(t)
			a, b := newOptimistic(t), newOptimistic(t)
			for i := 0; i < 3; i++ {
				if _, err := a.Update(ctx, key, incr, nil); err != nil {
					t.Fatal(err)
				}
			}
			read, err := a.Get(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if gone == "deleted" {
				err = rdb.Del(ctx, redislock.ValueKey(key)).Err()
			} else {
				err = rdb.PExpire(ctx, redislock.ValueKey(key), time.Millisecond).Err()
			}
			if err != nil {
				t.Fatal(err)
			}
			eventually(t, "the value is gone", func() bool { return rdb.Exists(ctx, redislock.ValueKey(key)).Val() == 0 })
			seen := map[uint64]bool{read.Version: true}
			for i := 0; i < 3; i++ {
				v, err := b.Update(ctx, key, func(redislock.Versioned) (string, error) { return "b", nil }, nil)
				if err != nil {
					t.Fatal(err)
				}
				if seen[v.Version] || v.Version <= read.Version {
					t.Fatalf("write %d got version %d again (read %d before the value was %s)", i, v.Version, read.Version, gone)
				}
				seen[v.Version] = true
			}
			_, err = a.CompareAndSet(ctx, key, read.Version, "a")
			if !errors.Is(err, redislock.ErrVersionConflict) {
				t.Fatalf("a write based on version %d read before the value was %s: %v, want a version conflict", read.Version, gone, err)
			}
			if v, _ := b.Get(ctx, key); v.Value != "b" {
				t.Fatalf("value %+v, want b's write", v)
			}
		})
	}
}

// A hash whose version field is not a version is foreign data, reported as
// dlock.ErrConflict by every method (not as a version conflict), and Update
// does not retry it.
func TestOptimisticForeignVersion(t *testing.T) {
	ctx := context.Background()
	rdb := newRDB(t, srv.Addr)
	o := newOptimistic(t)
	for _, n := range []string{"1.5", "abc", "-1", "", "99999999999999999999"} {
		key := dlocktest.Key(t) + ":" + n
		if err := rdb.HSet(ctx, redislock.ValueKey(key), "n", n, "v", "x").Err(); err != nil {
			t.Fatal(err)
		}
		_, err := o.Get(ctx, key)
		if !errors.Is(err, dlock.ErrConflict) || errors.Is(err, redislock.ErrVersionConflict) {
			t.Errorf("n=%q Get: %v, want ErrConflict", n, err)
		}
		for _, ver := range []uint64{0, 1} {
			_, err := o.CompareAndSet(ctx, key, ver, "y")
			if !errors.Is(err, dlock.ErrConflict) || errors.Is(err, redislock.ErrVersionConflict) {
				t.Errorf("n=%q CompareAndSet(%d): %v, want ErrConflict and no version conflict", n, ver, err)
			}
		}
		calls := 0
		_, err = o.Update(ctx, key, func(redislock.Versioned) (string, error) { calls++; return "y", nil }, nil)
		if !errors.Is(err, dlock.ErrConflict) || errors.Is(err, redislock.ErrVersionConflict) || calls > 1 {
			t.Errorf("n=%q Update: %v after %d calls, want ErrConflict at once", n, err, calls)
		}
		if v := rdb.HGet(ctx, redislock.ValueKey(key), "v").Val(); v != "x" {
			t.Errorf("n=%q: foreign hash changed to %q", n, v)
		}
	}
}

// A writer that always comes in between exhausts the retries: a VersionError
// with the number of attempts, and nothing of fn's written.
func TestOptimisticRetriesExhausted(t *testing.T) {
	ctx := context.Background()
	key := dlocktest.Key(t)
	o, other := newOptimistic(t), newOptimistic(t)
	calls := 0
	_, err := o.Update(ctx, key, func(cur redislock.Versioned) (string, error) {
		calls++
		if _, err := other.Update(ctx, key, incr, nil); err != nil { // the interloper
			return "", err
		}
		return "mine", nil
	}, dlock.LimitAttempts(dlock.FixedBackoff(time.Millisecond), 3))
	var ve *redislock.VersionError
	if !errors.As(err, &ve) || ve.Attempts != 3 || calls != 3 {
		t.Fatalf("Update: %v after %d calls, want a VersionError after 3", err, calls)
	}
	if v, _ := o.Get(ctx, key); v.Value != "3" {
		t.Fatalf("value %+v, want the interloper's 3", v)
	}
	abort := errors.New("sold out")
	if _, err := o.Update(ctx, key, func(redislock.Versioned) (string, error) { return "", abort }, nil); !errors.Is(err, abort) {
		t.Fatalf("fn's error: %v", err)
	}
}

func TestOptimisticBadInput(t *testing.T) {
	ctx := context.Background()
	var nilCtx context.Context
	o := newOptimistic(t)
	key := dlocktest.Key(t)
	rdb := newRDB(t, srv.Addr)
	if err := rdb.RPush(ctx, redislock.ValueKey(key), "x").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, redislock.ValueKey(key+".h"), "other", "1").Err(); err != nil {
		t.Fatal(err)
	}
	var nilO *redislock.Optimistic
	checks := []struct {
		name string
		err  error
		want error
	}{
		{"nil rdb", second(redislock.NewOptimistic(nil, 0)), dlock.ErrInvalid},
		{"negative ttl", second(redislock.NewOptimistic(rdb, -1)), dlock.ErrInvalid},
		{"nil Optimistic", second(nilO.Get(ctx, "k")), dlock.ErrInvalid},
		{"nil ctx", second(o.Get(nilCtx, "k")), dlock.ErrInvalid},
		{"bad key", second(o.CompareAndSet(ctx, "{k}", 0, "v")), dlock.ErrInvalid},
		{"nil fn", second(o.Update(ctx, "k", nil, nil)), dlock.ErrInvalid},
		{"bad retry", second(o.Update(ctx, "k", incr, dlock.LimitAttempts(nil, 2))), dlock.ErrInvalid},
		{"list Get", second(o.Get(ctx, key)), dlock.ErrConflict},
		{"list write", second(o.CompareAndSet(ctx, key, 0, "v")), dlock.ErrConflict},
		{"foreign hash Get", second(o.Get(ctx, key+".h")), dlock.ErrConflict},
		{"foreign hash write", second(o.CompareAndSet(ctx, key+".h", 0, "v")), dlock.ErrConflict},
	}
	for _, c := range checks {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
		}
	}
	if n, _ := rdb.HLen(ctx, redislock.ValueKey(key+".h")).Result(); n != 1 {
		t.Errorf("foreign hash changed: %d fields", n)
	}
}

func second[T any](_ T, err error) error { return err }

func ExampleOptimistic_Update() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	stock, err := redislock.NewOptimistic(rdb, time.Hour)
	if err != nil {
		panic(err)
	}
	soldOut := errors.New("sold out")
	_, _ = stock.CompareAndSet(ctx, "example:stock", 0, "1") // one item left
	buy := func(cur redislock.Versioned) (string, error) {
		n, _ := strconv.Atoi(cur.Value)
		if n <= 0 {
			return "", soldOut
		}
		return strconv.Itoa(n - 1), nil
	}
	for _, buyer := range []string{"ann", "bob"} {
		v, err := stock.Update(ctx, "example:stock", buy, nil)
		fmt.Println(buyer, v.Value, err)
	}
	_ = rdb.Del(ctx, redislock.ValueKey("example:stock")).Err()
	// It prints:
	// ann 0 <nil>
	// bob  sold out
}
