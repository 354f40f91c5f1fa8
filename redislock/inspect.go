package redislock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock/internal/redisscript"
	"github.com/redis/go-redis/v9"
)

// LockInfo is what the server holds about one lock, as read by Inspect, List and
// ForceUnlock. On Redis, TTL is 0 when the lock is free; LastToken is the fence
// counter, 0 once it has expired (see FenceRetention), and for a plain lock the
// token in its lock record, 0 once the record is gone; Waiters counts the
// waiters queued for a fair lock (see NewFair), including any whose queue entry
// is about to be dropped, and for a plain lock the processes on its waiting set
// (several waiters of one Client count once; a waiter joins it once it is
// subscribed to the lock's wake-ups, right after its first attempt).
type LockInfo = driver.LockInfo

// inspect reads the lock named key as a lock of kind k.
func (c *conn) inspect(ctx context.Context, key string, k kind) (LockInfo, error) {
	if ctx == nil {
		return LockInfo{}, fmt.Errorf("%w: nil context", driver.ErrInvalid)
	}
	if err := driver.ValidateKey(key); err != nil {
		return LockInfo{}, err
	}
	res, err := k.script.Run(ctx, c.sc, k.keys(key), k.args...).Slice()
	info, err := k.reply(key, res, err)
	return k.named(info), err
}

// named fills info.Kind for a held lock of kind k: a mutex with queued waiters
// is a fair one, unless the reply read a plain lock's record (Kind already
// KindMutex), whose waiters are those of its waiting set. A free lock has no
// kind.
func (k kind) named(info LockInfo) LockInfo {
	record := info.Kind == driver.KindMutex
	info.Kind = ""
	if info.Held {
		info.Kind = k.name
		if k.name == driver.KindMutex && info.Waiters > 0 && !record {
			info.Kind = driver.KindFair
		}
	}
	return info
}

// kind is what Inspect, List and ForceUnlock need to know of a lock kind: the
// script that reads a lock (with its keys and arguments), how to decode its
// reply, and how to remove the holding just read.
type kind struct {
	name   string // the LockInfo.Kind of a held lock (see named)
	script *redis.Script
	keys   func(key string) []string
	args   []any
	reply  func(key string, res []any, err error) (LockInfo, error)
	force  func(ctx context.Context, key string, info LockInfo) error
}

// mutexKind is the kind of the mutexes (New, NewFair), released by rel.
func mutexKind(rel func(ctx context.Context, key, owner string) error) kind {
	return kind{
		name: driver.KindMutex, script: redisscript.Inspect, keys: inspectKeys, reply: inspectReply,
		force: func(ctx context.Context, key string, info LockInfo) error { return rel(ctx, key, info.Owner) },
	}
}

// list lists the held locks of kind k whose names start with prefix.
func (c *conn) list(ctx context.Context, prefix string, k kind) ([]LockInfo, error) {
	names, err := c.names(ctx, prefix)
	if err != nil {
		return nil, err
	}
	infos, _, err := c.read(ctx, names, k)
	return infos, err
}

// names returns the names of the locks whose names start with prefix, of every
// kind, held or not, sorted. prefix holds no glob character (see driver.List).
func (c *conn) names(ctx context.Context, prefix string) ([]string, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", driver.ErrInvalid)
	}
	match := LockKey(prefix + "*")
	if c.rdb == nil {
		return c.scanOver(ctx, match)
	}
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
		cmds := make([]*redis.Cmd, len(batch))
		if c.rdb == nil {
			// Over a Transport, one call at a time (which a client such as
			// rueidis pipelines with the others under way).
			for i, name := range batch {
				cmds[i] = k.script.Run(ctx, c.sc, k.keys(name), k.args...)
			}
		} else {
			pipe := c.rdb.Pipeline()
			for i, name := range batch {
				// EVAL, not EVALSHA: in a cluster each master may not have the script yet.
				cmds[i] = k.script.Eval(ctx, pipe, k.keys(name), k.args...)
			}
			_, _ = pipe.Exec(ctx) // errors are read per command
		}
		for i, cmd := range cmds {
			res, err := cmd.Slice()
			info, err := k.reply(batch[i], res, err)
			info = k.named(info)
			switch {
			case errors.Is(err, driver.ErrConflict):
				other = append(other, batch[i])
			case err != nil:
				return nil, nil, err
			case info.Held || info.DelayLeft > 0:
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
	if !ok || driver.ValidateKey(name) != nil {
		return "", false
	}
	return name, true
}

// forceAttempts bounds how often ForceUnlock re-reads a lock that changed hands
// between its read and its release.
const forceAttempts = 3

// forceUnlock removes the holding(s) of the lock named key, of kind k.
func (c *conn) forceUnlock(ctx context.Context, key string, k kind) (LockInfo, error) {
	for i := 0; i < forceAttempts; i++ {
		info, err := c.inspect(ctx, key, k)
		if err != nil {
			return info, err
		}
		if !info.Held {
			return info, fmt.Errorf("%w: %q is free", driver.ErrNotHeld, key)
		}
		err = k.force(ctx, key, info)
		if err == nil {
			c.pushLoss(ctx, key)
		}
		if !errors.Is(err, driver.ErrNotHeld) {
			return info, err
		}
	}
	return LockInfo{Key: key}, fmt.Errorf("%w: %q changed hands %d times while being removed", driver.ErrNotHeld, key, forceAttempts)
}

// fairKind is the kind of the fair mutex, released by rel.
func fairKind(rel func(ctx context.Context, key, owner string) error) kind {
	k := mutexKind(rel)
	k.name = driver.KindFair
	return k
}

// reentrantKind is the kind of the reentrant mutex, whose holds are all
// released by rel.
func reentrantKind(rel func(ctx context.Context, key, holder string) error) kind {
	k := mutexKind(rel)
	k.name = driver.KindReentrant
	return k
}

// inspection is the driver.Inspector of every driver: it reads and forces the
// locks of the driver's kind k. The drivers embed it.
type inspection struct {
	c *conn
	k kind
}

// Inspect implements driver.Inspector: it reads the lock named key without
// changing it. A free lock is not an error: the result has Held false. The
// error matches dlock.ErrInvalid for a bad key, dlock.ErrConflict when the key
// holds foreign data or a lock of another kind, and dlock.ErrUnavailable when
// the server cannot be reached.
func (i inspection) Inspect(ctx context.Context, key string) (LockInfo, error) {
	return i.c.inspect(ctx, key, i.k)
}

// ListPrefix implements driver.Inspector: the locks held now whose names start
// with prefix (driver.List and Client.List filter them by a pattern and sort
// them). On a *redis.ClusterClient every master is scanned, on a *redis.Ring every
// shard. Keys that hold foreign data or locks of another kind are skipped.
func (i inspection) ListPrefix(ctx context.Context, prefix string) ([]LockInfo, error) {
	return i.c.list(ctx, prefix, i.k)
}

// ForceUnlock implements driver.Inspector: it removes the lock named key whoever
// holds it, and returns what it removed. The holder is told at once: the
// force-unlock publishes the lock's name on "dlock:lost", on which the Client
// of every holder listens while it holds locks, and the holder's lease is lost
// (dlock.LossStoreSignal) after one owner-checked read; a holder that missed
// the message learns of the loss at its next renewal. The fence counter is kept, so tokens keep
// increasing. The release is owner-checked against the holder just read, so a
// lock that changed hands meanwhile is read again rather than removed unseen.
// The error matches dlock.ErrNotHeld when the lock is free, and otherwise as
// for Inspect.
func (i inspection) ForceUnlock(ctx context.Context, key string) (LockInfo, error) {
	return i.c.forceUnlock(ctx, key, i.k)
}

// Inspector reads and forces the locks of every kind this package makes (New,
// NewFair, NewReentrant, NewSemaphore, NewRWMutex) through one go-redis client,
// as tools such as the dlock command need: a Client's own Inspect reports a
// lock of another kind as dlock.ErrConflict. It tells the kind of a lock from
// the fields of its hash and reads it as that kind, filling LockInfo.Kind; a
// plain and a fair mutex differ only while the fair one has queued waiters, so
// a fair mutex that nobody waits for shows as driver.KindMutex. It is a
// driver.Inspector.
type Inspector struct {
	c                         *conn
	mutex, reentrant, sem, rw kind
}

var _ driver.Inspector = (*Inspector)(nil)

// NewInspector returns an Inspector over rdb. It returns an error matching
// dlock.ErrInvalid for a nil client; it does no I/O.
func NewInspector(rdb redis.UniversalClient) (*Inspector, error) {
	c, err := newConn(rdb)
	if err != nil {
		return nil, err
	}
	fair := &FairDriver{c: c}
	mutex := mutexKind(c.releaseForced)
	plain := mutex.force
	mutex.force = func(ctx context.Context, key string, info LockInfo) error {
		if info.Kind == driver.KindFair {
			return fair.release(ctx, key, info.Owner) // the lock goes to the head of its queue
		}
		return plain(ctx, key, info)
	}
	return &Inspector{
		c: c, mutex: mutex, reentrant: reentrantKind(c.releaseForced), // every hold goes with the holding
		sem: newMultiHolder(c, semMarker).kind(), rw: newMultiHolder(c, rwMarker).kind(),
	}, nil
}

// kindFields are the lock hash fields that tell the kinds apart, in the order
// kindOf reads them.
var kindFields = []string{semMarker, rwMarker, "c"}

// kindOf returns the kind of lock that the reply of HMGET kindFields names,
// and false when the key holds foreign data. A key that holds a string is read
// as a plain mutex, whose lock record is one (its inspection tells a record
// from foreign data).
func (in *Inspector) kindOf(f []any, err error) (kind, bool) {
	switch {
	case redis.HasErrorPrefix(err, "WRONGTYPE"):
		return in.mutex, true
	case err != nil || len(f) != len(kindFields):
		return kind{}, false
	case f[0] != nil:
		return in.sem, true
	case f[1] != nil:
		return in.rw, true
	case f[2] != nil:
		return in.reentrant, true
	}
	return in.mutex, true // also a free lock
}

// classify reads the kind of the lock named key.
func (in *Inspector) classify(ctx context.Context, key string) (kind, error) {
	if in == nil || in.c == nil {
		return kind{}, fmt.Errorf("%w: nil inspector", driver.ErrInvalid)
	}
	if ctx == nil {
		return kind{}, fmt.Errorf("%w: nil context", driver.ErrInvalid)
	}
	if err := driver.ValidateKey(key); err != nil {
		return kind{}, err
	}
	f, err := in.c.rdb.HMGet(ctx, LockKey(key), kindFields...).Result()
	if err != nil && !errors.Is(mapErr(err), driver.ErrConflict) {
		return kind{}, mapErr(err)
	}
	k, ok := in.kindOf(f, err)
	if !ok {
		return kind{}, in.foreign(ctx, key, mapErr(err))
	}
	return k, nil
}

// each reads the kind of the lock named key and calls f with it; a key whose
// kind changed between the two reads is read again.
func (in *Inspector) each(ctx context.Context, key string, f func(k kind) (LockInfo, error)) (LockInfo, error) {
	for i := 0; ; i++ {
		k, err := in.classify(ctx, key)
		if err != nil {
			return LockInfo{Key: key}, err
		}
		info, err := f(k)
		if !errors.Is(err, driver.ErrConflict) {
			return info, err
		}
		if ferr := in.foreign(ctx, key, err); ferr != err || i == forceAttempts-1 {
			return info, ferr
		}
	}
}

// Inspect reads the lock named key, whatever its kind, as Driver.Inspect does.
// The error matches dlock.ErrConflict when the key holds data that is no dlock
// lock of any kind: a *ForeignDataError where one of the lock's Redis keys
// holds data of the wrong type.
func (in *Inspector) Inspect(ctx context.Context, key string) (LockInfo, error) {
	return in.each(ctx, key, func(k kind) (LockInfo, error) { return in.c.inspect(ctx, key, k) })
}

// ForceUnlock removes the lock named key whatever its kind, as
// Driver.ForceUnlock does (every holder of a semaphore or read-write lock).
func (in *Inspector) ForceUnlock(ctx context.Context, key string) (LockInfo, error) {
	return in.each(ctx, key, func(k kind) (LockInfo, error) { return in.c.forceUnlock(ctx, key, k) })
}

// ListPrefix returns the held locks of every kind whose names start with
// prefix, in any order, as inspection.ListPrefix does; driver.List filters
// and sorts them. The keys are scanned once, the kind of each
// lock read in pipelined batches, and each lock read as its kind.
func (in *Inspector) ListPrefix(ctx context.Context, prefix string) ([]LockInfo, error) {
	if in == nil || in.c == nil {
		return nil, fmt.Errorf("%w: nil inspector", driver.ErrInvalid)
	}
	names, err := in.c.names(ctx, prefix)
	if err != nil {
		return nil, err
	}
	byKind := map[string][]string{}
	kinds := map[string]kind{}
	for rest := names; len(rest) > 0; {
		batch := rest[:min(len(rest), listBatch)]
		rest = rest[len(batch):]
		pipe := in.c.rdb.Pipeline()
		cmds := make([]*redis.SliceCmd, len(batch))
		for i, name := range batch {
			cmds[i] = pipe.HMGet(ctx, LockKey(name), kindFields...)
		}
		_, _ = pipe.Exec(ctx) // errors are read per command
		for i, cmd := range cmds {
			f, err := cmd.Result()
			if err != nil && !errors.Is(mapErr(err), driver.ErrConflict) {
				return nil, mapErr(err)
			}
			if k, ok := in.kindOf(f, err); ok {
				byKind[k.name] = append(byKind[k.name], batch[i])
				kinds[k.name] = k
			}
		}
	}
	var all []LockInfo
	for id, names := range byKind {
		infos, _, err := in.c.read(ctx, names, kinds[id]) // a lock of another kind by now is left out
		if err != nil {
			return nil, err
		}
		all = append(all, infos...)
	}
	return all, nil
}

// ForeignDataError reports that one of the Redis keys of a lock holds data that
// is not part of a dlock lock. It matches dlock.ErrConflict.
type ForeignDataError struct {
	Key      string // the lock name
	RedisKey string // the Redis key holding foreign data
	Type     string // its Redis type (a TYPE reply); "hash" for a lock hash without a lock's fields, "string" for a string that is no lock record
}

func (e *ForeignDataError) Error() string {
	what := "a " + e.Type
	if e.Type == "hash" {
		what = "a hash without a lock owner"
	}
	return fmt.Sprintf("redislock: key %q holds data that is not a dlock lock (Redis key %q is %s)", e.Key, e.RedisKey, what)
}

// Is makes a ForeignDataError match dlock.ErrConflict.
func (e *ForeignDataError) Is(target error) bool { return target == driver.ErrConflict }

// foreign returns err, or a *ForeignDataError naming the Redis key of the lock
// named key that holds foreign data when err matches dlock.ErrConflict and
// such a key is found.
func (in *Inspector) foreign(ctx context.Context, key string, err error) error {
	if !errors.Is(err, driver.ErrConflict) {
		return err
	}
	for _, k := range []struct{ key, typ string }{
		{LockKey(key), "hash"}, {FenceKey(key), "string"}, {queueKey(key), "list"}, {queueDeadlineKey(key), "zset"},
		{readersKey(key), "zset"},
	} {
		typ, terr := in.c.rdb.Type(ctx, k.key).Result()
		if terr != nil {
			return err
		}
		if typ == "string" && k.key == LockKey(key) {
			v, gerr := in.c.rdb.Get(ctx, k.key).Result()
			if gerr != nil {
				return err
			}
			if _, ok := parseRecord(v); ok {
				continue
			}
		}
		if typ != "none" && typ != k.typ {
			return &ForeignDataError{Key: key, RedisKey: k.key, Type: typ}
		}
		if typ == "hash" {
			f, ferr := in.c.rdb.HMGet(ctx, k.key, "o", semMarker, rwMarker).Result()
			if ferr != nil {
				return err
			}
			if f[0] == nil && f[1] == nil && f[2] == nil {
				return &ForeignDataError{Key: key, RedisKey: k.key, Type: typ}
			}
		}
	}
	return err
}
