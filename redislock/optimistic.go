package redislock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redisscript"
	"github.com/redis/go-redis/v9"
)

// ErrVersionConflict reports an optimistic write refused because the value
// changed since it was read: by CompareAndSet at once, by Update once its
// retries are exhausted. Nothing was written. A *VersionError carries the
// details. It matches dlock.ErrConflict (the key holds other data than the
// caller expected), as every VersionError does.
var ErrVersionConflict error = &versionConflict{}

type versionConflict struct{}

func (*versionConflict) Error() string { return "redislock: version conflict" }

// Is makes ErrVersionConflict match dlock.ErrConflict.
func (*versionConflict) Is(target error) bool { return target == driver.ErrConflict }

// VersionError is the error of a refused optimistic write. It matches
// ErrVersionConflict and dlock.ErrConflict.
type VersionError struct {
	Key      string
	Expected uint64 // the version the write was based on
	Current  uint64 // the version found
	Attempts int    // the writes tried (Update; 1 for CompareAndSet)
}

// Error says which version was expected and which was found.
func (e *VersionError) Error() string {
	return fmt.Sprintf("%s: %q is at version %d, not %d (%d attempts)", ErrVersionConflict, e.Key, e.Current, e.Expected, e.Attempts)
}

// Is makes a *VersionError match ErrVersionConflict and dlock.ErrConflict.
func (e *VersionError) Is(target error) bool {
	return target == ErrVersionConflict || target == driver.ErrConflict
}

// Versioned is a value with its version: 0 for a value that does not exist.
// Every write gives the value a higher version, and a key's versions never
// repeat, also after the value was deleted or expired and written again: they
// are fencing tokens drawn from the key's fence counter (FenceKey), which
// outlives the value (see FenceRetention). So a write based on a version read
// before a delete never lands on a value written after it.
type Versioned struct {
	Value   string
	Version uint64
}

// DefaultOptimisticRetry is Update's retry strategy when none is given: up to
// 32 writes, with a jittered backoff from 1ms to 64ms between them.
var DefaultOptimisticRetry = dlock.LimitAttempts(dlock.ExponentialBackoff(time.Millisecond, 64*time.Millisecond), 32)

// Optimistic is optimistic concurrency control for values in Redis, the
// alternative to taking a lock around a read-modify-write: read the value and
// its version, compute, and write only if the version is unchanged, retrying
// from the fresh value otherwise. Each value is one hash at ValueKey(key)
// holding the value and its version, and each write is one Lua script (the
// check and the write in one step, one round trip) that also draws the new
// version from the key's fence counter, FenceKey(key), shared with the locks of
// that name. It suits short updates
// under moderate contention; under heavy contention on one value the retries
// cost more than a lock's waiting. It is safe for concurrent use.
type Optimistic struct {
	rdb redis.UniversalClient
	ttl time.Duration
}

// NewOptimistic returns an Optimistic over rdb (any redis.UniversalClient).
// Every write gives the value ttl to live (rounded up to a millisecond); 0 means
// values do not expire. It returns an error matching dlock.ErrInvalid for a nil
// client or a negative ttl; it does no I/O.
func NewOptimistic(rdb redis.UniversalClient, ttl time.Duration) (*Optimistic, error) {
	if driver.IsNil(rdb) {
		return nil, fmt.Errorf("%w: nil redis client", driver.ErrInvalid)
	}
	if ttl < 0 {
		return nil, fmt.Errorf("%w: negative ttl %v", driver.ErrInvalid, ttl)
	}
	return &Optimistic{rdb: rdb, ttl: ttl}, nil
}

func (o *Optimistic) check(ctx context.Context, key string) error {
	if o == nil {
		return fmt.Errorf("%w: nil Optimistic", driver.ErrInvalid)
	}
	if ctx == nil {
		return fmt.Errorf("%w: nil context", driver.ErrInvalid)
	}
	return driver.ValidateKey(key)
}

// Get reads the value named key and its version (0 with an empty value when it
// does not exist). The error matches dlock.ErrInvalid for a bad key,
// dlock.ErrConflict when the key holds something else, and
// dlock.ErrUnavailable when the server cannot be reached.
func (o *Optimistic) Get(ctx context.Context, key string) (Versioned, error) {
	if err := o.check(ctx, key); err != nil {
		return Versioned{}, err
	}
	m, err := o.rdb.HGetAll(ctx, ValueKey(key)).Result()
	if err != nil {
		return Versioned{}, mapErr(err)
	}
	if len(m) == 0 {
		return Versioned{}, nil
	}
	n, ok := m["n"]
	if !ok || len(m) > 2 {
		return Versioned{}, notVersioned(key)
	}
	return versioned(key, n, m["v"])
}

// maxVersion is the largest version a value may have: the scripts compare
// versions as Lua numbers, exact up to 2^53.
const maxVersion = 1 << 53

func notVersioned(key string) error {
	return fmt.Errorf("%w: redislock: %q is not a versioned value", driver.ErrConflict, key)
}

func versioned(key string, n, v any) (Versioned, error) {
	var out Versioned
	out.Value, _ = v.(string)
	switch n := n.(type) {
	case nil:
		if v != nil {
			break
		}
		return out, nil
	case string:
		if ver, err := strconv.ParseUint(n, 10, 64); err == nil && ver <= maxVersion {
			out.Version = ver
			return out, nil
		}
	case int64:
		if n >= 0 && n <= maxVersion {
			out.Version = uint64(n)
			return out, nil
		}
	}
	return Versioned{}, notVersioned(key)
}

// CompareAndSet writes value to key if the value is still at version (0: if
// it does not exist), and returns the new version. Otherwise it writes nothing
// and returns a *VersionError (matching ErrVersionConflict) with the current
// version. Other errors are as for Get.
func (o *Optimistic) CompareAndSet(ctx context.Context, key string, version uint64, value string) (uint64, error) {
	if err := o.check(ctx, key); err != nil {
		return 0, err
	}
	n, _, err := o.cas(ctx, key, version, value)
	return n, err
}

// cas runs one write; on a version conflict it also returns the current value.
func (o *Optimistic) cas(ctx context.Context, key string, version uint64, value string) (uint64, Versioned, error) {
	ms := int64(0)
	if o.ttl > 0 {
		ms = (o.ttl + time.Millisecond - 1).Milliseconds()
	}
	res, err := redisscript.Optimistic.Run(ctx, o.rdb, []string{ValueKey(key), FenceKey(key)},
		strconv.FormatUint(version, 10), value, ms, fenceRetentionMS).Slice()
	if err != nil {
		return 0, Versioned{}, mapErr(err)
	}
	if len(res) < 2 {
		return 0, Versioned{}, fmt.Errorf("%w: redislock: unexpected reply %v", driver.ErrRefused, res)
	}
	if ok, _ := res[0].(int64); ok == 1 {
		n, _ := res[1].(int64)
		return uint64(n), Versioned{}, nil
	}
	var v any
	if len(res) > 2 {
		v = res[2]
	}
	cur, err := versioned(key, res[1], v)
	if err != nil {
		return 0, Versioned{}, err
	}
	return 0, cur, &VersionError{Key: key, Expected: version, Current: cur.Version, Attempts: 1}
}

// Update changes the value named key with fn, optimistically: fn receives the
// current value and version and returns the new value, which is written only
// if nobody wrote in between; otherwise fn runs again on the value found,
// after a backoff from retry (DefaultOptimisticRetry when nil), until a write
// succeeds, retry gives up (a *VersionError, matching ErrVersionConflict, with
// the number of attempts), or ctx ends (its error). fn may run several times
// and must have no other effects; an error from fn ends Update with that
// error and nothing written. Update returns what it wrote, with its version.
func (o *Optimistic) Update(ctx context.Context, key string, fn func(cur Versioned) (string, error), retry dlock.RetryStrategy) (Versioned, error) {
	if err := o.check(ctx, key); err != nil {
		return Versioned{}, err
	}
	if fn == nil {
		return Versioned{}, fmt.Errorf("%w: nil update function", driver.ErrInvalid)
	}
	if retry == nil {
		retry = DefaultOptimisticRetry
	}
	if err := dlock.ValidateRetry(retry); err != nil {
		return Versioned{}, err
	}
	cur, err := o.Get(ctx, key)
	if err != nil {
		return Versioned{}, err
	}
	var timer *time.Timer
	for n := 1; ; n++ {
		value, err := fn(cur)
		if err != nil {
			return Versioned{}, err
		}
		ver, found, err := o.cas(ctx, key, cur.Version, value)
		if err == nil {
			return Versioned{Value: value, Version: ver}, nil
		}
		var ve *VersionError
		if !errors.As(err, &ve) {
			return Versioned{}, err
		}
		ve.Attempts = n
		d := retry.Backoff(n)
		if d < 0 {
			return Versioned{}, ve
		}
		cur = found
		if timer == nil {
			timer = time.NewTimer(d)
			defer timer.Stop()
		} else {
			timer.Reset(d)
		}
		select {
		case <-ctx.Done():
			return Versioned{}, fmt.Errorf("%w: %w", ve, ctx.Err())
		case <-timer.C:
		}
	}
}
