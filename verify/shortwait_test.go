package verify

import (
	"context"
	"fmt"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redisscript"
	"github.com/dlock-go/dlock/redlock"
	"github.com/redis/go-redis/v9"
)

// shortWaitRedlock returns a Redlock Client over rdbs broken as the shortwait
// variant: a waiting attempt keeps its place in a master's waiting set only
// for its own round trip (its process leaves the set as soon as the master
// answered busy), as before Redlock's waiters kept their places for their
// whole wait. A release then wakes nobody: the waiters sleep until the
// holding they found would run out, and the releasing process takes the lock
// again meanwhile.
func shortWaitRedlock(rdbs []*redis.Client) (*dlock.Client, error) {
	nodes := make([]redis.UniversalClient, len(rdbs))
	for i, c := range rdbs {
		c.AddHook(shortWait{rdb: c})
		nodes[i] = c
	}
	return redlock.New(nodes)
}

// shortWait is one master's connection for the shortwait variant: after a
// busy answer to an acquisition that joined the waiting set, it takes the
// waiter's process off the set.
type shortWait struct{ rdb *redis.Client }

// DialHook implements redis.Hook.
func (h shortWait) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessPipelineHook implements redis.Hook.
func (h shortWait) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// ProcessHook implements redis.Hook.
func (h shortWait) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		keys, argv, ok := scriptCall(cmd, redisscript.Acquire.Hash())
		// acquire.lua: KEYS[4] the waiting set, ARGV[7] the process's hub
		// id ('' when it does not join); a busy reply is {0, pttl, score}.
		if !ok || err != nil || len(keys) < 4 || len(argv) < 7 || argv[6] == "" || !reply(cmd, 0) {
			return err
		}
		_ = h.rdb.ZRem(context.WithoutCancel(ctx), fmt.Sprint(keys[3]), argv[6]).Err()
		return err
	}
}
