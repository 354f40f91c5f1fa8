package redlock_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/redisscript"
	"github.com/dlock-go/dlock/redislock"
	"github.com/dlock-go/dlock/redlock"
	"github.com/redis/go-redis/v9"
)

// heldBack holds back a node's clean-up releases (the abandon script) as a
// network that delays them would: the caller gets no answer in time, and the
// release lands when the test sends it. While failRaise is on, the node does
// not answer the recording of a token either (the raise script, not sent).
type heldBack struct {
	mu        sync.Mutex
	cmds      [][]any
	failRaise bool
}

func (h *heldBack) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *heldBack) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		// Scripts run as EVALSHA first, and only NOSCRIPT falls back to EVAL.
		if cmd.Name() != "evalsha" || len(args) < 2 {
			return next(ctx, cmd)
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		switch {
		case args[1] == redisscript.Abandon.Hash():
			h.cmds = append(h.cmds, args)
		case args[1] == redisscript.Raise.Hash() && h.failRaise:
		default:
			return next(ctx, cmd)
		}
		cmd.SetErr(context.DeadlineExceeded)
		return context.DeadlineExceeded
	}
}

func (h *heldBack) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *heldBack) setFailRaise(on bool) {
	h.mu.Lock()
	h.failRaise = on
	h.mu.Unlock()
}

// land sends the releases held back so far to the node on rdb, as they would
// land late, and returns how many it sent.
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

// lateNodes returns a driver over nodes 0-2, each reached through a client
// that holds back clean-up releases, the clients that reach them directly,
// and the hooks.
func lateNodes(t *testing.T) (*redlock.Driver, []*redis.Client, []*heldBack) {
	var slow []redis.UniversalClient
	var direct []*redis.Client
	var hbs []*heldBack
	for _, s := range srvs[:3] {
		rdb := newRDB(t, s.Addr)
		hb := &heldBack{}
		rdb.AddHook(hb)
		slow, direct, hbs = append(slow, rdb), append(direct, newRDB(t, s.Addr)), append(hbs, hb)
	}
	d, err := redlock.NewDriver(slow)
	if err != nil {
		t.Fatal(err)
	}
	return d, direct, hbs
}

// checkHeld fails the test unless the lease h holds a majority of nodes 0-2,
// as its owner believes, so that no other owner can take the lock.
func checkHeld(ctx context.Context, t *testing.T, d *redlock.Driver, h driver.Holding) {
	t.Helper()
	if got := held(t, h.Key, 0, 1, 2); len(got) < 2 {
		t.Errorf("nodes held after the late releases: %v, want a majority", got)
	}
	if _, err := d.TTL(ctx, h); err != nil {
		t.Errorf("TTL of the lease after the late releases: %v (a minority holds it)", err)
	}
	y := driver.AcquireRequest{Key: h.Key, Owner: "yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy", TTL: h.TTL}
	if _, err := d.Acquire(ctx, y); err == nil {
		t.Errorf("another owner took the lock while the lease holds it")
		_ = d.Release(ctx, driver.Holding{Key: h.Key, Owner: y.Owner, TTL: y.TTL})
	}
	if err := d.Release(ctx, h); err != nil {
		t.Errorf("release of the lease: %v", err)
	}
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
	d, direct, hbs := lateNodes(t)
	// Another owner holds nodes 0 and 1, each on its own.
	x := driver.AcquireRequest{Key: key, Owner: "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", TTL: ttl}
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
	xh := driver.Holding{Key: key, Owner: x.Owner, TTL: ttl}
	t.Cleanup(func() {
		for _, nd := range xs {
			_ = nd.Release(context.Background(), xh)
		}
	})

	r := driver.AcquireRequest{Key: key, Owner: "0123456789abcdef0123456789abcdef", TTL: ttl}
	var busy *driver.Taken
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
	if n := hbs[2].land(ctx, t, direct[2]); n != 1 {
		t.Fatalf("%d releases held back, want the first attempt's clean-up", n)
	}
	// The other owner lets node 1 go: the lease must still hold nodes 0 and 2.
	if err := xs[1].Release(ctx, xh); err != nil {
		t.Fatal(err)
	}
	if got := held(t, key, 0, 1, 2); len(got) != 2 || got[0] != 0 || got[1] != 2 {
		t.Errorf("nodes held after the late release: %v, want 0 and 2", got)
	}
	h := driver.Holding{Key: key, Owner: r.Owner, TTL: ttl, Handle: g.Handle}
	if _, err := d.TTL(ctx, h); err != nil {
		t.Errorf("TTL of the lease after the late release: %v (a minority holds it)", err)
	}
	y := driver.AcquireRequest{Key: key, Owner: "yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy", TTL: ttl}
	if _, err := d.Acquire(ctx, y); err == nil {
		t.Errorf("another owner took the lock while the lease holds it")
		_ = d.Release(ctx, driver.Holding{Key: key, Owner: y.Owner, TTL: ttl})
	}
	if err := d.Release(ctx, h); err != nil {
		t.Errorf("release of the lease: %v", err)
	}
}

// TestLateCleanupAfterFailedRaiseLeavesLaterAttempt: a majority granted an
// attempt, but its token could not be recorded on the nodes that drew less, so
// the attempt failed and released what it was granted; those releases land
// after the next attempt of the same acquisition took every node again.
func TestLateCleanupAfterFailedRaiseLeavesLaterAttempt(t *testing.T) {
	key := dlocktest.Key(t)
	ctx := ctxT(t, 20*time.Second)
	const ttl = 10 * time.Second
	d, direct, hbs := lateNodes(t)
	// Node 0 draws tokens far above the others', which raise records on them,
	// and node 1 tokens between node 0's and node 2's: whichever two nodes
	// grant first, they drew different tokens, and the one that drew less
	// must have the greater recorded. (Two nodes whose clocks both drew the
	// same microsecond agree without a raise: the first attempt then holds.)
	const ahead = 9_000_000_000_000_000 // microseconds: a clock centuries ahead
	for i, at := range []uint64{ahead, ahead / 2} {
		if err := direct[i].Set(ctx, redislock.FenceKey(key), strconv.FormatUint(at, 10), time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { direct[i].Del(context.Background(), redislock.FenceKey(key)) })
	}
	hbs[1].setFailRaise(true)
	hbs[2].setFailRaise(true)
	r := driver.AcquireRequest{Key: key, Owner: "0123456789abcdef0123456789abcdef", TTL: ttl}
	if _, err := d.Acquire(ctx, r); !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("first attempt, whose token is not recorded: %v, want ErrUnavailable", err)
	}
	hbs[1].setFailRaise(false)
	hbs[2].setFailRaise(false)
	g, err := d.Acquire(ctx, r)
	if err != nil {
		t.Fatalf("second attempt: %v", err)
	}
	landed := 0
	for i, hb := range hbs {
		landed += hb.land(ctx, t, direct[i])
	}
	if landed < 2 {
		t.Fatalf("%d releases held back, want the first attempt's clean-up of its majority", landed)
	}
	checkHeld(ctx, t, d, driver.Holding{Key: key, Owner: r.Owner, TTL: ttl, Handle: g.Handle})
}
