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
	return c.c.inspect(ctx, key, c.kind)
}

// inspect reads the lock named key as a lock of kind k.
func (c *conn) inspect(ctx context.Context, key string, k kind) (LockInfo, error) {
	if ctx == nil {
		return LockInfo{}, fmt.Errorf("%w: nil context", dlock.ErrInvalid)
	}
	if err := dlock.ValidateKey(key); err != nil {
		return LockInfo{}, err
	}
	res, err := k.script.Run(ctx, c.rdb, k.keys(key), k.args...).Slice()
	return k.reply(key, res, err)
}

// kind is what Inspect, List and ForceUnlock need to know of a lock kind: the
// script that reads a lock (with its keys and arguments), how to decode its
// reply, and how to remove the holding just read.
type kind struct {
	script *redis.Script
	keys   func(key string) []string
	args   []any
	reply  func(key string, res []any, err error) (LockInfo, error)
	force  func(ctx context.Context, key string, info LockInfo) error
}

// mutexKind is the kind of the mutexes (New, NewFair), released by rel.
func mutexKind(rel func(ctx context.Context, key, owner string) error) kind {
	return kind{
		script: inspectScript, keys: inspectKeys, reply: inspectReply,
		force: func(ctx context.Context, key string, info LockInfo) error { return rel(ctx, key, info.Owner) },
	}
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
	info.Held, info.Owner, info.Holders, info.Limit = true, owner, 1, 1
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
	return c.c.list(ctx, pattern, c.kind)
}

// list lists the held locks of kind k whose names match pattern.
func (c *conn) list(ctx context.Context, pattern string, k kind) ([]LockInfo, error) {
	names, err := c.names(ctx, pattern)
	if err != nil {
		return nil, err
	}
	infos, _, err := c.read(ctx, names, k)
	return infos, err
}

// names returns the names of the locks whose names match pattern, of every
// kind, held or not, sorted.
func (c *conn) names(ctx context.Context, pattern string) ([]string, error) {
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
	return slices.Compact(names), nil // a key can be seen twice while a cluster moves slots
}

// read reads the locks named names as locks of kind k, in pipelined batches,
// and returns the held ones, and the names whose keys hold something else (a
// lock of another kind, or foreign data).
func (c *conn) read(ctx context.Context, names []string, k kind) (infos []LockInfo, other []string, err error) {
	infos = make([]LockInfo, 0, len(names))
	for len(names) > 0 {
		batch := names[:min(len(names), listBatch)]
		names = names[len(batch):]
		pipe := c.rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(batch))
		for i, name := range batch {
			// EVAL, not EVALSHA: in a cluster each master may not have the script yet.
			cmds[i] = k.script.Eval(ctx, pipe, k.keys(name), k.args...)
		}
		_, _ = pipe.Exec(ctx) // errors are read per command
		for i, cmd := range cmds {
			res, err := cmd.Slice()
			info, err := k.reply(batch[i], res, err)
			switch {
			case errors.Is(err, dlock.ErrConflict):
				other = append(other, batch[i])
			case err != nil:
				return nil, nil, err
			case info.Held:
				infos = append(infos, info)
			}
		}
	}
	return infos, other, nil
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
	return c.c.forceUnlock(ctx, key, c.kind)
}

// forceUnlock removes the holding(s) of the lock named key, of kind k.
func (c *conn) forceUnlock(ctx context.Context, key string, k kind) (LockInfo, error) {
	for i := 0; i < forceAttempts; i++ {
		info, err := c.inspect(ctx, key, k)
		if err != nil {
			return info, err
		}
		if !info.Held {
			return info, fmt.Errorf("%w: %q is free", dlock.ErrNotHeld, key)
		}
		err = k.force(ctx, key, info)
		if !errors.Is(err, dlock.ErrNotHeld) {
			return info, err
		}
	}
	return LockInfo{Key: key}, fmt.Errorf("%w: %q changed hands %d times while being removed", dlock.ErrNotHeld, key, forceAttempts)
}

// Inspector reads and forces the locks of every kind this package makes (New,
// NewFair, NewSemaphore, NewRWMutex) through one go-redis client, as tools such
// as the dlock command need: a Client's own Inspect reports a lock of another
// kind as dlock.ErrConflict. It is a dlock.Inspector.
type Inspector struct {
	kinds []*Client // one Client per kind of lock, tried in turn
}

var _ dlock.Inspector = (*Inspector)(nil)

// NewInspector returns an Inspector over rdb. It returns an error matching
// dlock.ErrInvalid for a nil client; it does no I/O.
func NewInspector(rdb redis.UniversalClient) (*Inspector, error) {
	m, err := New(rdb)
	if err != nil {
		return nil, err
	}
	s, err := NewSemaphore(rdb, 1) // the number of permits is read, not checked
	if err != nil {
		return nil, err
	}
	rw, err := NewRWMutex(rdb)
	if err != nil {
		return nil, err
	}
	return &Inspector{kinds: []*Client{m, s, rw.Client}}, nil
}

// each calls f with the Client of each kind until f's error is not
// dlock.ErrConflict (the key is a lock of that kind, or free), and returns what
// the last call returned.
func (in *Inspector) each(f func(c *Client) (LockInfo, error)) (info LockInfo, err error) {
	if in == nil || len(in.kinds) == 0 {
		return LockInfo{}, fmt.Errorf("%w: nil inspector", dlock.ErrInvalid)
	}
	for _, c := range in.kinds {
		if info, err = f(c); !errors.Is(err, dlock.ErrConflict) {
			return info, err
		}
	}
	return info, err
}

// Inspect reads the lock named key, whatever its kind, as Client.Inspect does.
// The error matches dlock.ErrConflict when the key holds data that is no dlock
// lock of any kind.
func (in *Inspector) Inspect(ctx context.Context, key string) (LockInfo, error) {
	return in.each(func(c *Client) (LockInfo, error) { return c.Inspect(ctx, key) })
}

// ForceUnlock removes the lock named key whatever its kind, as Client.ForceUnlock
// does (every holder of a semaphore or read-write lock).
func (in *Inspector) ForceUnlock(ctx context.Context, key string) (LockInfo, error) {
	return in.each(func(c *Client) (LockInfo, error) { return c.ForceUnlock(ctx, key) })
}

// List returns the held locks of every kind whose names match pattern, sorted
// by name, as Client.List does. The keys are scanned once, and each lock is
// read as the first kind it is.
func (in *Inspector) List(ctx context.Context, pattern string) ([]LockInfo, error) {
	if _, err := in.each(func(*Client) (LockInfo, error) { return LockInfo{}, nil }); err != nil {
		return nil, err
	}
	names, err := in.kinds[0].c.names(ctx, pattern)
	if err != nil {
		return nil, err
	}
	var all []LockInfo
	for _, c := range in.kinds {
		if len(names) == 0 {
			break
		}
		infos, other, err := c.c.read(ctx, names, c.kind)
		if err != nil {
			return nil, err
		}
		all = append(all, infos...)
		names = other
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Key < all[j].Key })
	return all, nil
}
