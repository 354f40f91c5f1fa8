package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/redisscript"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// reshaped is a go-redis hook that replaces the reply of every run of one
// script with reply: a server that answers what dlock does not expect (a
// script of another version under the same name, a proxy in between).
type reshaped struct {
	sha   string
	reply []any
}

func (r *reshaped) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *reshaped) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if c, ok := cmd.(*redis.Cmd); ok && err == nil && cmd.Name() == "evalsha" && len(cmd.Args()) > 1 && cmd.Args()[1] == r.sha {
			c.SetVal(r.reply)
		}
		return err
	}
}

func (r *reshaped) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// reshapedRDB returns a client of the test server whose runs of script s get
// reply instead of the server's.
func reshapedRDB(t *testing.T, s *redis.Script, reply ...any) *redis.Client {
	rdb := newRDB(t, srv.Addr)
	if err := s.Load(context.Background(), rdb).Err(); err != nil { // runs are EVALSHA
		t.Fatal(err)
	}
	rdb.AddHook(&reshaped{sha: s.Hash(), reply: reply})
	return rdb
}

// sentinels are what every error of the module wraps (see dlock's errors.go).
var sentinels = []error{dlock.ErrNotObtained, dlock.ErrNotHeld, dlock.ErrLockLost, dlock.ErrReleased,
	dlock.ErrInvalid, dlock.ErrConflict, dlock.ErrUnavailable, dlock.ErrRefused, dlock.ErrStaleToken,
	context.Canceled, context.DeadlineExceeded, errors.ErrUnsupported}

// TestEveryErrorWrapsASentinel: the errors of paths that used to wrap no
// sentinel (unexpected script replies, foreign data in a fence record, a
// resource fenced by another lock, notifications through a Ring) match the
// sentinel that says what happened, as errors.go promises of every error.
func TestEveryErrorWrapsASentinel(t *testing.T) {
	ctx := context.Background()
	tok := func(t *testing.T, c *redislock.Client) *dlock.Lease {
		l, err := c.TryLock(ctx, dlocktest.Key(t), dlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Unlock(ctx) })
		return l
	}
	fence := func(t *testing.T, rdb *redis.Client) *redislock.Fence {
		f, err := redislock.NewFence(rdb)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	cases := []struct {
		name string
		want error
		run  func(t *testing.T) error
	}{
		{"inspect reply of another shape", dlock.ErrRefused, func(t *testing.T) error {
			c, err := redislock.New(reshapedRDB(t, redisscript.Inspect, int64(1)))
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Inspect(ctx, dlocktest.Key(t))
			return err
		}},
		{"fenced-write reply of another length", dlock.ErrRefused, func(t *testing.T) error {
			_, err := fence(t, reshapedRDB(t, redisscript.Fenced, int64(1))).IncrBy(ctx, tok(t, newClient(t)), dlocktest.Key(t), 1)
			return err
		}},
		{"fenced-write reply with an unknown code", dlock.ErrRefused, func(t *testing.T) error {
			_, err := fence(t, reshapedRDB(t, redisscript.Fenced, int64(7), int64(0))).IncrBy(ctx, tok(t, newClient(t)), dlocktest.Key(t), 1)
			return err
		}},
		{"fence record with a token that is no number", dlock.ErrConflict, func(t *testing.T) error {
			rdb := newRDB(t, srv.Addr)
			res := dlocktest.Key(t)
			rk, err := redislock.FenceRecordKey(res)
			if err != nil {
				t.Fatal(err)
			}
			if err := rdb.HSet(ctx, rk, "k", "lock", "t", "not-a-token").Err(); err != nil {
				t.Fatal(err)
			}
			_, _, err = fence(t, rdb).Newest(ctx, res)
			return err
		}},
		{"resource fenced by another lock", dlock.ErrConflict, func(t *testing.T) error {
			f := fence(t, newRDB(t, srv.Addr))
			c := newClient(t)
			res := dlocktest.Key(t)
			if _, err := f.IncrBy(ctx, tok(t, c), res, 1); err != nil {
				t.Fatal(err)
			}
			_, err := f.IncrBy(ctx, tok(t, c), res, 1)
			if !errors.Is(err, redislock.ErrForeignFence) {
				t.Errorf("write under another lock: %v, want ErrForeignFence", err)
			}
			return err
		}},
		{"ErrForeignFence itself", dlock.ErrConflict, func(*testing.T) error { return redislock.ErrForeignFence }},
		{"notifications through a Ring", errors.ErrUnsupported, func(t *testing.T) error {
			ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srv.Addr}})
			t.Cleanup(func() { _ = ring.Close() })
			d, err := redislock.NewFairDriver(ring)
			if err != nil {
				t.Fatal(err)
			}
			_, cancel, err := d.Subscribe(ctx, driver.Holding{Key: dlocktest.Key(t), Owner: "00112233445566778899aabbccddeeff", TTL: time.Minute})
			if err == nil {
				cancel()
			}
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.run(t)
			if !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want one matching %v", err, tc.want)
			}
			for _, s := range sentinels {
				if errors.Is(err, s) {
					return
				}
			}
			t.Fatalf("error %v matches no sentinel", err)
		})
	}
}
