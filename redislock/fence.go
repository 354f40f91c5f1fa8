package redislock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redisscript"
	"github.com/redis/go-redis/v9"
)

// ErrForeignFence reports a fenced write refused because the resource is fenced
// by another lock key: tokens of different locks are not comparable, so a token
// of lock A says nothing about writes made under lock B. It also matches
// dlock.ErrConflict (errors.Is(ErrForeignFence, dlock.ErrConflict) is true).
// Nothing was changed.
var ErrForeignFence error = &foreignFenceError{}

type foreignFenceError struct{}

func (*foreignFenceError) Error() string { return "redislock: resource is fenced by another lock" }

// Is makes ErrForeignFence match dlock.ErrConflict.
func (*foreignFenceError) Is(target error) bool { return target == driver.ErrConflict }

// FenceToken is what a fenced write needs from the lock that protects it: the lock
// key and the fencing token of the holding. *dlock.Lease implements it; a worker
// that receives a token from its lock holder can implement it with a small struct.
type FenceToken interface {
	Key() string
	Token() uint64
}

// Fence performs fenced writes on plain Redis keys (resources): each write runs
// only if the caller's fencing token is not older than the newest token that
// wrote the resource before, so a holder that lost its lock (paused past its TTL,
// cut off, or overtaken after a restart or failover) cannot overwrite the work of
// the holder that came after it. The check and the write are one Lua script.
//
// Each resource has a fence record, a hash at FenceRecordKey(resource) holding the
// lock key that fences the resource and the newest token that wrote it. The
// record is in the resource's hash slot (Redis Cluster) and expires FenceRetention
// after the last accepted write (or later, if a Set gives the resource a longer
// TTL). So a stale write can only get through once the record has expired, which
// takes a holder paused for longer than FenceRetention. Writes that bypass Fence
// are not checked; give every writer of a fenced resource the same lock.
//
// Tokens are compared as integers. A Fence is safe for concurrent use.
type Fence struct {
	rdb redis.UniversalClient
}

// NewFence returns a Fence over rdb (a *redis.Client, *redis.ClusterClient,
// Sentinel failover client or any redis.UniversalClient). It returns an error
// matching dlock.ErrInvalid for a nil client; it does no I/O.
func NewFence(rdb redis.UniversalClient) (*Fence, error) {
	if driver.IsNil(rdb) {
		return nil, fmt.Errorf("%w: nil redis client", driver.ErrInvalid)
	}
	return &Fence{rdb: rdb}, nil
}

// FenceRecordKey returns the key of the fence record of resource. It shares the
// resource's hash slot: "dlock:fenced:{TAG}:RESOURCE" when the resource has a
// hash tag TAG, and "dlock:fenced:{RESOURCE}" otherwise. It returns an error
// matching dlock.ErrInvalid for an empty resource, one under Prefix, and one that
// contains '}' without a hash tag (no record key can share its slot).
func FenceRecordKey(resource string) (string, error) {
	switch {
	case resource == "":
		return "", fmt.Errorf("%w: empty resource key", driver.ErrInvalid)
	case strings.HasPrefix(resource, Prefix):
		return "", fmt.Errorf("%w: resource %q is under the lock prefix %q", driver.ErrInvalid, resource, Prefix)
	}
	if tag, ok := redisscript.HashTag(resource); ok {
		return Prefix + "fenced:{" + tag + "}:" + resource, nil
	}
	if strings.Contains(resource, "}") {
		return "", fmt.Errorf("%w: resource %q contains '}' but no hash tag; give it one", driver.ErrInvalid, resource)
	}
	return Prefix + "fenced:{" + resource + "}", nil
}

// Set sets resource to value (with the given TTL; 0 means none) if tok is not
// older than the newest token that wrote resource. Otherwise it returns an error
// matching dlock.ErrStaleToken and changes nothing.
func (f *Fence) Set(ctx context.Context, tok FenceToken, resource, value string, ttl time.Duration) error {
	if ttl < 0 {
		return fmt.Errorf("%w: negative ttl %v", driver.ErrInvalid, ttl)
	}
	ms := int64(0)
	if ttl > 0 {
		ms = (ttl + time.Millisecond - 1).Milliseconds()
	}
	_, err := f.run(ctx, tok, resource, "set", value, ms)
	return err
}

// IncrBy adds n to the integer at resource (a missing resource counts as 0) if tok
// is not older than the newest token that wrote resource, and returns the new
// value. Otherwise it returns an error matching dlock.ErrStaleToken and changes
// nothing.
func (f *Fence) IncrBy(ctx context.Context, tok FenceToken, resource string, n int64) (int64, error) {
	return f.run(ctx, tok, resource, "incrby", strconv.FormatInt(n, 10), 0)
}

// Del deletes resource if tok is not older than the newest token that wrote it,
// and reports whether it existed. The fence record stays, so a stale holder cannot
// re-create the resource afterwards. Otherwise it returns an error matching
// dlock.ErrStaleToken and changes nothing.
func (f *Fence) Del(ctx context.Context, tok FenceToken, resource string) (bool, error) {
	n, err := f.run(ctx, tok, resource, "del", "", 0)
	return n == 1, err
}

// Newest returns the lock key and the newest token recorded for resource, or
// ("", 0) when no fenced write is on record.
func (f *Fence) Newest(ctx context.Context, resource string) (lock string, token uint64, err error) {
	rk, err := FenceRecordKey(resource)
	if err != nil {
		return "", 0, err
	}
	v, err := f.rdb.HMGet(ctx, rk, "k", "t").Result()
	if err != nil {
		return "", 0, mapErr(err)
	}
	lock, _ = v[0].(string)
	if s, ok := v[1].(string); ok {
		if token, err = strconv.ParseUint(s, 10, 64); err != nil {
			return "", 0, fmt.Errorf("%w: redislock: fence record %q: bad token %q", driver.ErrConflict, rk, s)
		}
	}
	return lock, token, nil
}

func (f *Fence) run(ctx context.Context, tok FenceToken, resource, op, arg string, ttlMS int64) (int64, error) {
	if f == nil {
		return 0, fmt.Errorf("%w: nil fence", driver.ErrInvalid)
	}
	if ctx == nil {
		return 0, fmt.Errorf("%w: nil context", driver.ErrInvalid)
	}
	if driver.IsNil(tok) || tok.Token() == 0 {
		return 0, fmt.Errorf("%w: fenced write without a fencing token", driver.ErrInvalid)
	}
	lock, token := tok.Key(), tok.Token()
	if err := driver.ValidateKey(lock); err != nil {
		return 0, err
	}
	rk, err := FenceRecordKey(resource)
	if err != nil {
		return 0, err
	}
	retention := max(FenceRetention.Milliseconds(), ttlMS)
	ts := strconv.FormatUint(token, 10)
	res, err := redisscript.Fenced.Run(ctx, f.rdb, []string{rk, resource},
		lock, ts, op, arg, ttlMS, retention).Slice()
	if err != nil {
		var rerr redis.Error
		if errors.As(err, &rerr) && (strings.Contains(err.Error(), "not an integer") || strings.Contains(err.Error(), "overflow")) {
			return 0, fmt.Errorf("%w: %s on %q: %w", driver.ErrConflict, op, resource, err)
		}
		return 0, mapErr(err)
	}
	if len(res) != 2 {
		return 0, fmt.Errorf("%w: redislock: unexpected fenced-write reply %v", driver.ErrRefused, res)
	}
	code, _ := res[0].(int64)
	switch code {
	case 1:
		n, _ := res[1].(int64)
		return n, nil
	case 0:
		newest, _ := strconv.ParseUint(fmt.Sprint(res[1]), 10, 64)
		dlock.ReportStaleToken(tok, resource, newest)
		return 0, fmt.Errorf("%w: %s on %q with token %d of %q, but token %v already wrote it",
			driver.ErrStaleToken, op, resource, token, lock, res[1])
	case 2:
		return 0, fmt.Errorf("%w: %q is fenced by lock %q, not %q", ErrForeignFence, resource, res[1], lock)
	}
	return 0, fmt.Errorf("%w: redislock: unexpected fenced-write reply %v", driver.ErrRefused, res)
}
