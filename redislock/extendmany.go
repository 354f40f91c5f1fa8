package redislock

import (
	"context"
	"fmt"
	"strconv"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock/internal/redisscript"
	"github.com/redis/go-redis/v9"
)

// ExtendBatch is the most holdings one call of the batch extend script carries.
// A Client's renewals that fall due together go to the server in calls of up to
// this many holdings, all in one pipeline: one round trip per renewal round. On
// Redis Cluster (and through a redis.Ring), where one script may only touch one
// slot, each holding is a call of its own, and the pipeline takes one round
// trip per server.
const ExtendBatch = 100

var (
	_ driver.BatchExtender = (*Driver)(nil)
	_ driver.BatchExtender = (*FairDriver)(nil)
)

// ExtendMany implements dlock.BatchExtender.
func (d *Driver) ExtendMany(ctx context.Context, reqs []driver.ExtendRequest) []driver.ExtendResult {
	return d.c.extendMany(ctx, reqs)
}

// ExtendMany implements dlock.BatchExtender.
func (d *FairDriver) ExtendMany(ctx context.Context, reqs []driver.ExtendRequest) []driver.ExtendResult {
	return d.c.extendMany(ctx, reqs)
}

// extendMany extends mutex holdings (lock records, plain or fair) in one
// pipeline of batch extend scripts.
func (c *conn) extendMany(ctx context.Context, reqs []driver.ExtendRequest) []driver.ExtendResult {
	per := ExtendBatch
	if _, single := c.rdb.(*redis.Client); !single && (c.rdb != nil || c.w.sharded()) {
		per = 1 // a Cluster or a Ring: every script call stays on one slot
	}
	type call struct {
		from, to int
		cmd      *redis.Cmd
	}
	calls := make([]call, 0, (len(reqs)+per-1)/per)
	for from := 0; from < len(reqs); from += per {
		calls = append(calls, call{from: from, to: min(from+per, len(reqs))})
	}
	for _, eval := range []bool{false, true} {
		var pipe redis.Pipeliner // nil over a Transport: one call at a time
		if c.rdb != nil {
			pipe = c.rdb.Pipeline()
		}
		again := false
		for i := range calls {
			cl := &calls[i]
			if eval && !redis.HasErrorPrefix(cl.cmd.Err(), "NOSCRIPT") {
				continue
			}
			again = true
			keys := make([]string, 0, cl.to-cl.from)
			args := make([]any, 0, 1+2*(cl.to-cl.from))
			args = append(args, "1") // lock records
			for _, r := range reqs[cl.from:cl.to] {
				keys = append(keys, LockKey(r.Holding.Key))
				args = append(args, r.Holding.Owner, strconv.FormatInt(r.TTL.Milliseconds(), 10))
			}
			switch {
			case pipe == nil: // falls back to EVAL itself
				cl.cmd = redisscript.ExtendMany.Run(ctx, c.sc, keys, args...)
			case eval:
				cl.cmd = redisscript.ExtendMany.Eval(ctx, pipe, keys, args...)
			default:
				cl.cmd = redisscript.ExtendMany.EvalSha(ctx, pipe, keys, args...)
			}
		}
		if !again || pipe == nil {
			break
		}
		_, _ = pipe.Exec(ctx) // errors are read per command
	}
	out := make([]driver.ExtendResult, len(reqs))
	for _, cl := range calls {
		res, err := cl.cmd.Slice()
		if err == nil && len(res) != cl.to-cl.from {
			err = fmt.Errorf("%w: redislock: %d replies from the batch extend of %d locks", driver.ErrRefused, len(res), cl.to-cl.from)
		}
		for i := cl.from; i < cl.to; i++ {
			if err != nil {
				out[i].Err = mapErr(err)
				continue
			}
			out[i] = extendEntry(reqs[i], res[i-cl.from])
		}
	}
	return out
}

// extendEntry decodes one entry of the batch extend script's reply.
func extendEntry(r driver.ExtendRequest, v any) driver.ExtendResult {
	switch v := v.(type) {
	case int64:
		ttl, err := extendReply(r.Holding.Key, v, nil, r.TTL)
		return driver.ExtendResult{TTL: ttl, Err: err}
	case error:
		return driver.ExtendResult{Err: mapErr(v)}
	}
	return driver.ExtendResult{Err: fmt.Errorf("%w: redislock: unexpected extend reply %v", driver.ErrRefused, v)}
}
