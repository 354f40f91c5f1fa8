package verify

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redisscript"
	"github.com/dlock-go/dlock/redlock"
	"github.com/redis/go-redis/v9"
)

// lateCleanupRedlock returns a Redlock Client over rdbs broken as the
// latecleanup variant: the clean-up of a failed attempt releases each node that
// granted it by owner alone, whatever the token of the holding there (Redlock's
// clean-up before it released only the holding with the token the attempt
// drew), and that release is held up in the network until the same owner's
// next attempt has taken the node again, where it lands and removes that
// attempt's holding (the lease then believes it holds a majority it may not),
// or until delay has passed.
func lateCleanupRedlock(rdbs []*redis.Client, delay time.Duration) (*dlock.Client, error) {
	nodes := make([]redis.UniversalClient, len(rdbs))
	for i, c := range rdbs {
		c.AddHook(&lateCleanup{rdb: c, delay: delay, held: map[string]*heldRelease{}})
		nodes[i] = c
	}
	return redlock.New(nodes)
}

// lateCleanup is one node's network for the latecleanup variant: it holds back
// the clean-up releases (redislock's abandon script with a drawn token), and
// sends each one, by owner alone, right after the same owner's next attempt
// was granted on the node, or once delay has passed.
type lateCleanup struct {
	rdb   *redis.Client
	delay time.Duration
	mu    sync.Mutex
	held  map[string]*heldRelease // per lock key and owner: the release held back
}

// heldRelease is a release held back: the abandon script's keys and arguments.
type heldRelease struct {
	keys []string
	argv []any
}

// take removes the release held back for id and returns it (nil: none, or
// not rel when rel is not nil).
func (h *lateCleanup) take(id string, rel *heldRelease) *heldRelease {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.held[id]
	if r == nil || rel != nil && r != rel {
		return nil
	}
	delete(h.held, id)
	return r
}

// land sends rel to the node; its outcome reaches nobody.
func (h *lateCleanup) land(rel *heldRelease) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = redisscript.Abandon.Run(ctx, h.rdb, rel.keys, rel.argv...).Err()
}

// DialHook implements redis.Hook.
func (h *lateCleanup) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessPipelineHook implements redis.Hook.
func (h *lateCleanup) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// ProcessHook implements redis.Hook.
func (h *lateCleanup) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		keys, argv, abandon := scriptCall(cmd, redisscript.Abandon.Hash())
		acquire := false
		if !abandon {
			keys, argv, acquire = scriptCall(cmd, redisscript.Acquire.Hash())
		}
		if !abandon && !acquire || len(keys) < 1 || len(argv) < 1 {
			return next(ctx, cmd)
		}
		held := fmt.Sprint(keys[0], " ", argv[0]) // the lock key and the owner
		switch {
		case abandon && len(argv) >= 5 && argv[4] != "": // ARGV[5]: the drawn token
			// A clean-up release of the token an attempt drew: by owner
			// alone, as before the fix, and not now.
			rel := &heldRelease{keys: toStrings(keys), argv: slices.Clone(argv)}
			rel.argv[4] = ""
			h.mu.Lock()
			h.held[held] = rel
			h.mu.Unlock()
			time.AfterFunc(h.delay, func() {
				if r := h.take(held, rel); r != nil {
					h.land(r)
				}
			})
			cmd.SetErr(context.DeadlineExceeded) // the answer does not come in time
			return context.DeadlineExceeded
		case acquire:
			err := next(ctx, cmd)
			if rel := h.take(held, nil); rel != nil {
				// It lands after the attempt, and removes the holding
				// the attempt took.
				h.land(rel)
			}
			return err
		}
		return next(ctx, cmd)
	}
}

// scriptCall returns the keys and arguments of cmd when it runs script s (as
// EVALSHA, or as EVAL after a NOSCRIPT).
func scriptCall(cmd redis.Cmder, hash string) (keys, argv []any, ok bool) {
	args := cmd.Args()
	if name := cmd.Name(); name != "evalsha" && name != "eval" || len(args) < 3 {
		return nil, nil, false
	}
	if h := argString(args[1]); h != hash && (len(h) <= 40 || redis.NewScript(h).Hash() != hash) {
		return nil, nil, false
	}
	n, err := strconv.Atoi(argString(args[2]))
	if err != nil || n < 0 || len(args) < 3+n {
		return nil, nil, false
	}
	for _, a := range args[3:] {
		argv = append(argv, argString(a))
	}
	return argv[:n], argv[n:], true
}

// argString is a command argument as the server reads it (the lean script
// calls pass strings by pointer).
func argString(v any) string {
	if p, ok := v.(*string); ok {
		return *p
	}
	return fmt.Sprint(v)
}

// reply reports whether cmd's reply is a list whose first element is code.
func reply(cmd redis.Cmder, code int64) bool {
	c, ok := cmd.(*redis.Cmd)
	if !ok {
		return false
	}
	res, err := c.Slice()
	return err == nil && len(res) > 0 && res[0] == code
}

func toStrings(vs []any) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = fmt.Sprint(v)
	}
	return out
}
