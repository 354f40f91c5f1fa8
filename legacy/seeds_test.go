package legacy_test

// The old clients of the fleet, reproduced as the raw command sequences of the
// SETNX/GETSET recipes (the seed articles 000 to 003), so that dlock's locker can
// be tested against them on a real server.

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// oldClient is one old client holding at most one lock at a time.
type oldClient interface {
	// tryLock makes one attempt, as the recipe's lock() does once per loop.
	tryLock(ctx context.Context) (bool, error)
	// unlock is the recipe's unlock().
	unlock(ctx context.Context) error
}

// clockFunc is a client's local clock; a skewed client adds an offset.
type clockFunc func() time.Time

func skewed(d time.Duration) clockFunc { return func() time.Time { return time.Now().Add(d) } }

// jedisLock is seed 000's acquireLock (Jedis): SETNX the stamp now+expired+1; if the
// key exists, GET it and, when the stamp is below now, GETSET the same new stamp
// and keep the lock when GETSET returned the stamp read. Unlock is a DEL.
type jedisLock struct {
	rdb     *redis.Client
	key     string
	expired time.Duration
	now     clockFunc
}

func (c *jedisLock) tryLock(ctx context.Context) (bool, error) {
	value := c.now().UnixMilli() + c.expired.Milliseconds() + 1
	ok, err := c.rdb.SetNX(ctx, c.key, strconv.FormatInt(value, 10), 0).Result()
	if err != nil || ok {
		return ok, err
	}
	s, err := c.rdb.Get(ctx, c.key).Result()
	if err != nil {
		return false, nilIsFalse(err) // Long.valueOf(null) throws: no lock
	}
	oldValue, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return false, err
	}
	if oldValue < c.now().UnixMilli() {
		got, err := getset(ctx, c.rdb, c.key, strconv.FormatInt(value, 10))
		if err != nil {
			return false, nilIsFalse(err)
		}
		g, err := strconv.ParseInt(got, 10, 64)
		return err == nil && g == oldValue, err
	}
	return false, nil
}

func (c *jedisLock) unlock(ctx context.Context) error { return c.rdb.Del(ctx, c.key).Err() }

// springLock is seed 002's RedisLock.lock (Spring RedisTemplate), one pass of its
// loop: SETNX expires (now+expireMsecs+1); else GET; when the value is not null and
// below now, GETSET expires and keep the lock when the old value equals the one
// read (as strings). unlock() is a DEL without any check.
type springLock struct {
	rdb    *redis.Client
	key    string
	expire time.Duration
	now    clockFunc
	// beforeGetSet, when set, runs between the GET and the GETSET (tests use it
	// to line up racing takeovers); wrote receives the stamp GETSET wrote.
	beforeGetSet func()
	wrote        int64
}

func (c *springLock) tryLock(ctx context.Context) (bool, error) {
	expires := c.now().UnixMilli() + c.expire.Milliseconds() + 1
	expiresStr := strconv.FormatInt(expires, 10)
	ok, err := c.rdb.SetNX(ctx, c.key, expiresStr, 0).Result()
	if err != nil || ok {
		return ok, err
	}
	cur, err := c.rdb.Get(ctx, c.key).Result()
	if err != nil {
		return false, nilIsFalse(err)
	}
	v, err := strconv.ParseInt(cur, 10, 64)
	if err != nil {
		return false, err
	}
	if v < c.now().UnixMilli() {
		if c.beforeGetSet != nil {
			c.beforeGetSet()
		}
		old, err := getset(ctx, c.rdb, c.key, expiresStr)
		c.wrote = expires
		if err != nil {
			return false, nilIsFalse(err)
		}
		return old == cur, nil
	}
	return false, nil
}

func (c *springLock) unlock(ctx context.Context) error { return c.rdb.Del(ctx, c.key).Err() }

// phpAcquire behaves as seed 001's lock script (Predis, EVAL): SETNX the stamp
// then EXPIRE lock_expire+1 (0); a vanished key is 1; a stamp above now is 2;
// else GETSET the stamp plus lock_expire+1 and EXPIRE it when GETSET returned the
// stamp read (0), otherwise 3. Stamps are in seconds.
// KEYS[1] lock key  ARGV[1] time()+LOCK_EXPIRE+1  ARGV[2] LOCK_EXPIRE  ARGV[3] time()
var phpAcquire = redis.NewScript(`
local stamp = tonumber(ARGV[1])
local ttl = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
if redis.call('SETNX', KEYS[1], stamp) == 1 then
  redis.call('EXPIRE', KEYS[1], ttl + 1)
  return 0
end
local cur = redis.call('GET', KEYS[1])
if not cur then
  return 1
end
cur = tonumber(cur)
if cur > now then
  return 2
end
local prev = tonumber(redis.call('GETSET', KEYS[1], stamp + ttl + 1))
if prev == cur then
  redis.call('EXPIRE', KEYS[1], ttl + 1)
  return 0
end
return 3
`)

// phpRelease behaves as seed 001's unlock script: GET the stamp and DEL the key
// only when the stamp is at or below now. The condition is the wrong way round
// (the text says "delete unless expired"), so a live lock is never released.
var phpRelease = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur and tonumber(cur) <= tonumber(ARGV[1]) then
  redis.call('DEL', KEYS[1])
end
return 0
`)

// phpLock is seed 001's Lock class: lock() runs the script up to LOCK_RETRY_MAX
// (3) times; PHP's sleep(0.3) sleeps zero seconds (sleep takes an int).
type phpLock struct {
	rdb    *redis.Client
	key    string
	expire int64 // LOCK_EXPIRE, seconds
	now    clockFunc
}

func (c *phpLock) tryLock(ctx context.Context) (bool, error) {
	for retry := 1; ; retry++ {
		now := c.now().Unix()
		res, err := phpAcquire.Run(ctx, c.rdb, []string{c.key}, now+c.expire+1, c.expire, now).Int64()
		if err != nil {
			return false, err
		}
		if res == 0 {
			return true, nil
		}
		if retry >= 3 {
			return false, nil
		}
	}
}

func (c *phpLock) unlock(ctx context.Context) error {
	return phpRelease.Run(ctx, c.rdb, []string{c.key}, c.now().Unix()).Err()
}

// cppLock is seed 003's lock() (C++): SETNX time(NULL)+lock_timeout in seconds; if
// the key exists, GET it and, when is_expire (the stamp is below time(NULL); the
// article does not show the function), GETSET the new stamp and keep the lock when
// the old one is expired too. It does not compare the old stamp with the one it
// read. unlock() is a DEL.
type cppLock struct {
	rdb     *redis.Client
	key     string
	timeout int64 // seconds
	now     clockFunc
}

func (c *cppLock) isExpire(v string) bool {
	n, err := strconv.ParseInt(v, 10, 64)
	return err == nil && n < c.now().Unix()
}

func (c *cppLock) tryLock(ctx context.Context) (bool, error) {
	expire := strconv.FormatInt(c.now().Unix()+c.timeout, 10)
	ok, err := c.rdb.SetNX(ctx, c.key, expire, 0).Result()
	if err != nil || ok {
		return ok, err
	}
	cur, err := c.rdb.Get(ctx, c.key).Result()
	if err != nil {
		return false, nilIsFalse(err)
	}
	if c.isExpire(cur) {
		old, err := getset(ctx, c.rdb, c.key, expire)
		if err != nil {
			return false, nilIsFalse(err)
		}
		return c.isExpire(old), nil
	}
	return false, nil
}

func (c *cppLock) unlock(ctx context.Context) error { return c.rdb.Del(ctx, c.key).Err() }

// getset sends GETSET, as the old clients do (go-redis marks it deprecated in
// favour of SET GET).
func getset(ctx context.Context, rdb *redis.Client, key, value string) (string, error) {
	return rdb.Do(ctx, "GETSET", key, value).Text()
}

func nilIsFalse(err error) error {
	if errors.Is(err, redis.Nil) {
		return nil
	}
	return err
}

// dlockClient adapts dlock's legacy locker to oldClient for the contention tests.
type dlockClient struct {
	l     dlock.Locker
	key   string
	opts  []dlock.Option
	lease *dlock.Lease
	// lost counts Unlocks that found the lease's stamp replaced: an old client's
	// losing GETSET (it read a run-out stamp just before this lease took the
	// lock over) overwrites the stamp without taking the lock.
	lost atomic.Int32
}

func (c *dlockClient) tryLock(ctx context.Context) (bool, error) {
	l, err := c.l.TryLock(ctx, c.key, c.opts...)
	if errors.Is(err, dlock.ErrNotObtained) {
		return false, nil
	}
	c.lease = l
	return err == nil, err
}

func (c *dlockClient) unlock(ctx context.Context) error {
	err := c.lease.Unlock(ctx)
	c.lease = nil
	if errors.Is(err, dlock.ErrNotHeld) {
		c.lost.Add(1)
		return nil
	}
	return err
}

// overlap is the checker of the contention tests: every holder enters and
// leaves; a second holder inside is counted.
type overlap struct {
	inside   atomic.Int32
	overlaps atomic.Int32
	entries  atomic.Int32
	phase    atomic.Int32 // when set, counts are per name and phase
	mu       sync.Mutex
	by       map[string]int
}

func (o *overlap) enter(name string) {
	o.entries.Add(1)
	if o.inside.Add(1) != 1 {
		o.overlaps.Add(1)
	}
	o.mu.Lock()
	if o.by == nil {
		o.by = map[string]int{}
	}
	if p := o.phase.Load(); p != 0 {
		name += "@phase" + strconv.Itoa(int(p))
	}
	o.by[name]++
	o.mu.Unlock()
}

func (o *overlap) leave() { o.inside.Add(-1) }
