package redlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/redisscript"
	"github.com/dlock-go/dlock/redislock"
	"github.com/dlock-go/dlock/redlock"
	"github.com/redis/go-redis/v9"
)

// heldBack holds back a node's clean-up releases (the abandon script) as a
// network that delays them would: the caller gets no answer in time, and the
// release lands when the test sends it.
type heldBack struct {
	mu   sync.Mutex
	cmds [][]any
}

func (h *heldBack) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *heldBack) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		// The script runs as EVALSHA first, and only NOSCRIPT falls back to EVAL.
		if cmd.Name() == "evalsha" && len(args) > 1 && args[1] == redisscript.Abandon.Hash() {
			h.mu.Lock()
			h.cmds = append(h.cmds, args)
			h.mu.Unlock()
			err := context.DeadlineExceeded
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

func (h *heldBack) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// land sends the releases held back so far to the node on rdb, as they would
// land late.
func (h *heldBack) land(ctx context.Context, t *testing.T, rdb *redis.Client) int {
	t.Helper()
	h.mu.Lock()
	cmds := h.cmds
	h.cmds = nil
	h.mu.Unlock()
	if err := redisscript.Abandon.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	for _, args := range cmds {
		if err := rdb.Do(ctx, args...).Err(); err != nil {
			t.Fatalf("late release %v: %v", args, err)
		}
	}
	return len(cmds)
}

// TestLateCleanupLeavesLaterAttempt: an attempt that no majority granted
// releases the node that granted it, and that release is held up in the
// network; the next attempt of the same acquisition (the same owner) takes the
// node again, and the late release lands after it. The holding must survive
// it: the lease counts the node in its majority.
func TestLateCleanupLeavesLaterAttempt(t *testing.T) {
	key := dlocktest.Key(t)
	ctx := ctxT(t, 20*time.Second)
	const ttl = 10 * time.Second
	direct := []*redis.Client{newRDB(t, srvs[0].Addr), newRDB(t, srvs[1].Addr), newRDB(t, srvs[2].Addr)}
	slow := newRDB(t, srvs[2].Addr)
	hb := &heldBack{}
	slow.AddHook(hb)
	d, err := redlock.NewDriver([]redis.UniversalClient{direct[0], direct[1], slow})
	if err != nil {
		t.Fatal(err)
	}
	// Another owner holds nodes 0 and 1, each on its own.
	x := dlock.AcquireRequest{Key: key, Owner: "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", TTL: ttl}
	var xs []*redislock.Driver
	for _, rdb := range direct[:2] {
		nd, err := redislock.NewDriver(rdb)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nd.Acquire(ctx, x); err != nil {
			t.Fatal(err)
		}
		xs = append(xs, nd)
	}
	xh := dlock.Holding{Key: key, Owner: x.Owner, TTL: ttl}
	t.Cleanup(func() {
		for _, nd := range xs {
			_ = nd.Release(context.Background(), xh)
		}
	})

	r := dlock.AcquireRequest{Key: key, Owner: "0123456789abcdef0123456789abcdef", TTL: ttl}
	var busy *dlock.Busy
	if _, err := d.Acquire(ctx, r); !errors.As(err, &busy) {
		t.Fatalf("first attempt: %v, want busy", err)
	}
	// Node 0 becomes free; node 1 stays held: the next attempt's majority is
	// nodes 0 and 2.
	if err := xs[0].Release(ctx, xh); err != nil {
		t.Fatal(err)
	}
	g, err := d.Acquire(ctx, r)
	if err != nil {
		t.Fatalf("second attempt: %v", err)
	}
	if n := hb.land(ctx, t, direct[2]); n != 1 {
		t.Fatalf("%d releases held back, want the first attempt's clean-up", n)
	}
	h := dlock.Holding{Key: key, Owner: r.Owner, TTL: ttl, Handle: g.Handle}
	if got := held(t, key, 0, 1, 2); len(got) != 3 || got[2] != 2 {
		t.Errorf("nodes held after the late release: %v, want 0, 1 (the other owner) and 2", got)
	}
	if _, err := d.TTL(ctx, h); err != nil {
		t.Errorf("TTL of the lease after the late release: %v (a minority holds it)", err)
	}
	// The other owner lets node 1 go: a third owner must not get a majority.
	if err := xs[1].Release(ctx, xh); err != nil {
		t.Fatal(err)
	}
	y := dlock.AcquireRequest{Key: key, Owner: "yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy", TTL: ttl}
	if _, err := d.Acquire(ctx, y); err == nil {
		t.Errorf("another owner took the lock while the lease holds it")
		_ = d.Release(ctx, dlock.Holding{Key: key, Owner: y.Owner, TTL: ttl})
	}
	if err := d.Release(ctx, h); err != nil {
		t.Errorf("release of the lease: %v", err)
	}
}
