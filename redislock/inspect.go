package redislock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

//go:embed inspect.lua
var inspectSrc string

var inspectScript = redis.NewScript(inspectSrc)

// LockInfo is what the server holds about one lock, as read by Inspect, List and
// ForceUnlock. On Redis, TTL is 0 when the lock is free; LastToken is the fence
// counter, 0 once it has expired (see FenceRetention); Waiters counts the
// waiters queued for a fair lock (see NewFair), including any whose queue entry
// is about to be dropped, while waiters of a plain lock wait in their own
// processes and are not counted.
type LockInfo = dlock.LockInfo

// Inspect reads the lock named key without changing it. A free lock is not an
// error: the result has Held false. The error matches dlock.ErrInvalid for a bad
// key, dlock.ErrConflict when the key holds foreign data, and
// dlock.ErrUnavailable when the server cannot be reached.
func (c *Client) Inspect(ctx context.Context, key string) (LockInfo, error) {
	if c == nil {
		return LockInfo{}, fmt.Errorf("%w: nil client", dlock.ErrInvalid)
	}
	return c.c.inspect(ctx, key)
}

func (c *conn) inspect(ctx context.Context, key string) (LockInfo, error) {
	if ctx == nil {
		return LockInfo{}, fmt.Errorf("%w: nil context", dlock.ErrInvalid)
	}
	if err := dlock.ValidateKey(key); err != nil {
		return LockInfo{}, err
	}
	res, err := inspectScript.Run(ctx, c.rdb, inspectKeys(key)).Slice()
	return inspectReply(key, res, err)
}

func inspectKeys(key string) []string {
	return []string{LockKey(key), FenceKey(key), QueueKey(key)}
}

// inspectReply decodes the reply of inspect.lua for key.
func inspectReply(key string, res []any, err error) (LockInfo, error) {
	if err != nil {
		return LockInfo{}, mapErr(err)
	}
	if len(res) != 6 {
		return LockInfo{}, fmt.Errorf("redislock: unexpected inspect reply %v", res)
	}
	info := LockInfo{Key: key}
	info.LastToken = replyUint(res[4])
	info.Waiters = int(replyUint(res[5]))
	pttl, _ := res[3].(int64)
	owner, _ := res[0].(string)
	if owner == "" || pttl == -2 {
		return info, nil
	}
	info.Held, info.Owner = true, owner
	info.Token = replyUint(res[1])
	info.Metadata, _ = res[2].(string)
	if pttl > 0 {
		info.TTL = time.Duration(pttl) * time.Millisecond
	}
	return info, nil
}

func replyUint(v any) uint64 {
	switch v := v.(type) {
	case string:
		n, _ := strconv.ParseUint(v, 10, 64)
		return n
	case int64:
		if v > 0 {
			return uint64(v)
		}
	}
	return 0
}

// List returns the locks held now whose names match pattern, sorted by name.
// pattern is a Redis glob over lock names ("*" for all, "jobs:*", "job-?"); it
// must not contain '{', '}' or control characters. On a *redis.ClusterClient
// every master is scanned, on a *redis.Ring every shard. Keys that hold foreign
// data are skipped. The error matches dlock.ErrInvalid for a bad pattern and
// dlock.ErrUnavailable when a server cannot be reached.
func (c *Client) List(ctx context.Context, pattern string) ([]LockInfo, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil client", dlock.ErrInvalid)
	}
	return c.c.list(ctx, pattern)
}

func (c *conn) list(ctx context.Context, pattern string) ([]LockInfo, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", dlock.ErrInvalid)
	}
	if err := ValidatePattern(pattern); err != nil {
		return nil, err
	}
	match := LockKey(pattern)
	var (
		mu    sync.Mutex
		names []string
	)
	scan := func(ctx context.Context, node *redis.Client) error {
		iter := node.Scan(ctx, 0, match, 1000).Iterator()
		for iter.Next(ctx) {
			if name, ok := lockName(iter.Val()); ok {
				mu.Lock()
				names = append(names, name)
				mu.Unlock()
			}
		}
		return iter.Err()
	}
	var err error
	switch rdb := c.rdb.(type) {
	case *redis.ClusterClient:
		err = rdb.ForEachMaster(ctx, scan)
	case *redis.Ring:
		err = rdb.ForEachShard(ctx, scan)
	case *redis.Client:
		err = scan(ctx, rdb)
	default:
		iter := rdb.Scan(ctx, 0, match, 1000).Iterator()
		for iter.Next(ctx) {
			if name, ok := lockName(iter.Val()); ok {
				names = append(names, name)
			}
		}
		err = iter.Err()
	}
	if err != nil {
		return nil, mapErr(err)
	}
	sort.Strings(names)
	names = slices.Compact(names) // a key can be seen twice while a cluster moves slots
	infos := make([]LockInfo, 0, len(names))
	for len(names) > 0 {
		batch := names[:min(len(names), listBatch)]
		names = names[len(batch):]
		pipe := c.rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(batch))
		for i, name := range batch {
			// EVAL, not EVALSHA: in a cluster each master may not have the script yet.
			cmds[i] = inspectScript.Eval(ctx, pipe, inspectKeys(name))
		}
		_, _ = pipe.Exec(ctx) // errors are read per command
		for i, cmd := range cmds {
			res, err := cmd.Slice()
			info, err := inspectReply(batch[i], res, err)
			switch {
			case errors.Is(err, dlock.ErrConflict):
				continue
			case err != nil:
				return nil, err
			case info.Held:
				infos = append(infos, info)
			}
		}
	}
	return infos, nil
}

// listBatch is how many locks List reads in one pipelined round trip.
const listBatch = 256

// lockName returns the lock name of a Redis key written by this package, and
// false for companion keys (fence counters, queues) and foreign keys.
func lockName(redisKey string) (string, bool) {
	name, ok := strings.CutPrefix(redisKey, Prefix+"{")
	if !ok {
		return "", false
	}
	name, ok = strings.CutSuffix(name, "}")
	if !ok || dlock.ValidateKey(name) != nil {
		return "", false
	}
	return name, true
}

// ValidatePattern checks a List pattern (see dlock.ValidatePattern).
func ValidatePattern(pattern string) error { return dlock.ValidatePattern(pattern) }

// forceAttempts bounds how often ForceUnlock re-reads a lock that changed hands
// between its read and its release.
const forceAttempts = 3

// ForceUnlock removes the lock named key whoever holds it, and returns what it
// removed. It is an administrator's tool: the holder is not told, and learns of
// the loss at its next renewal. The fence counter is kept, so tokens keep
// increasing. The release is owner-checked against the holder just read, so a
// lock that changed hands meanwhile is read again rather than removed unseen.
// The error matches dlock.ErrNotHeld when the lock is free, and otherwise as
// for Inspect.
func (c *Client) ForceUnlock(ctx context.Context, key string) (LockInfo, error) {
	if c == nil {
		return LockInfo{}, fmt.Errorf("%w: nil client", dlock.ErrInvalid)
	}
	return c.c.forceUnlock(ctx, key, c.rel)
}

// forceUnlock is ForceUnlock with rel as the lock kind's owner-checked release.
func (c *conn) forceUnlock(ctx context.Context, key string, rel func(ctx context.Context, key, owner string) error) (LockInfo, error) {
	for i := 0; i < forceAttempts; i++ {
		info, err := c.inspect(ctx, key)
		if err != nil {
			return info, err
		}
		if !info.Held {
			return info, fmt.Errorf("%w: %q is free", dlock.ErrNotHeld, key)
		}
		err = rel(ctx, key, info.Owner)
		if !errors.Is(err, dlock.ErrNotHeld) {
			return info, err
		}
	}
	return LockInfo{Key: key}, fmt.Errorf("%w: %q changed hands %d times while being removed", dlock.ErrNotHeld, key, forceAttempts)
}
