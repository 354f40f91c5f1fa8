package redislock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// LatchKey returns the Redis key of the latch named name: a hash of its count
// c and the count n it was made with.
func LatchKey(name string) string { return Prefix + "{" + name + "}:latch" }

// BarrierKey returns the Redis key of the barrier named name: a hash of its
// number of parties n and whether it is open. Its parties' arrivals are a
// sorted set at BarrierKey(name)+":parties", scored by when each lapses.
func BarrierKey(name string) string { return Prefix + "{" + name + "}:barrier" }

// syncChannel is the pub/sub channel on which a latch or barrier named name
// announces its changes.
func syncChannel(name string) string { return Prefix + "{" + name + "}:sync" }

// SyncDriver is the driver.SyncDriver of Redis: latches and double barriers,
// each in its name's hash slot (so one slot on Redis Cluster), whose waiters are
// woken by pub/sub messages (sharded pub/sub on Cluster). Most users want
// NewLatch and NewBarrier instead.
type SyncDriver struct {
	rdb redis.UniversalClient
	pub string // PUBLISH, or SPUBLISH on Cluster
}

var _ driver.SyncDriver = (*SyncDriver)(nil)

// NewSyncDriver returns the latch and barrier driver over rdb. It returns an
// error matching dlock.ErrInvalid for a nil client; it does no I/O.
func NewSyncDriver(rdb redis.UniversalClient) (*SyncDriver, error) {
	if driver.IsNil(rdb) {
		return nil, fmt.Errorf("%w: nil redis client", driver.ErrInvalid)
	}
	pub := "PUBLISH"
	if _, ok := rdb.(*redis.ClusterClient); ok {
		pub = "SPUBLISH"
	}
	return &SyncDriver{rdb: rdb, pub: pub}, nil
}

// NewLatch returns the latch name over rdb, counting down from count and
// forgotten ttl after its last use (see dlock.NewLatch). It returns an error
// matching dlock.ErrInvalid for bad arguments; it does no I/O.
func NewLatch(rdb redis.UniversalClient, name string, count int, ttl time.Duration) (*dlock.Latch, error) {
	d, err := NewSyncDriver(rdb)
	if err != nil {
		return nil, err
	}
	return dlock.NewLatch(d, name, count, ttl)
}

// NewBarrier returns a party's handle on the double barrier name over rdb, for
// parties parties, each present ttl after its last renewal (see
// dlock.NewBarrier). It returns an error matching dlock.ErrInvalid for bad
// arguments; it does no I/O.
func NewBarrier(rdb redis.UniversalClient, name string, parties int, ttl time.Duration) (*dlock.Barrier, error) {
	d, err := NewSyncDriver(rdb)
	if err != nil {
		return nil, err
	}
	return dlock.NewBarrier(d, name, parties, ttl)
}

// latchHead reads the latch at KEYS[1] made with ARGV[1] into c (nil when it
// does not exist), or returns the conflict reply.
const latchHead = `
local c
local n = redis.call('HGET', KEYS[1], 'n')
if n then
  if n ~= ARGV[1] then
    return redis.error_reply('DLOCKCONFLICT latch made with count ' .. n .. ', not ' .. ARGV[1])
  end
  c = tonumber(redis.call('HGET', KEYS[1], 'c'))
end
if (n and not c) or (not n and redis.call('EXISTS', KEYS[1]) == 1) then
  return redis.error_reply('DLOCKCONFLICT key holds a hash that is not a dlock latch')
end
`

// latchCountDown: KEYS[1] the latch; ARGV n, TTL ms, publish command,
// channel. Returns the count after.
var latchCountDown = redis.NewScript(latchHead + `
c = c or tonumber(ARGV[1])
if c > 0 then
  c = c - 1
  if c == 0 then
    redis.call(ARGV[3], ARGV[4], '*')
  end
end
redis.call('HSET', KEYS[1], 'n', ARGV[1], 'c', c)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return c
`)

// latchCount: KEYS[1] the latch; ARGV n, TTL ms. Returns the count.
var latchCount = redis.NewScript(latchHead + `
if not c then
  return tonumber(ARGV[1])
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return c
`)

// barrierHead checks the barrier at KEYS[1] (parties at KEYS[2]) made with
// ARGV[1] parties, drops the arrivals that lapsed before now (ms), and sets
// open; a barrier with no arrival left is gone.
const barrierHead = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = redis.call('HGET', KEYS[1], 'n')
if n and n ~= ARGV[1] then
  return redis.error_reply('DLOCKCONFLICT barrier made with ' .. n .. ' parties, not ' .. ARGV[1])
end
if not n and redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.error_reply('DLOCKCONFLICT key holds a hash that is not a dlock barrier')
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local present = redis.call('ZCARD', KEYS[2])
if present == 0 and n then
  redis.call('DEL', KEYS[1])
  n = false
end
local open = n and redis.call('HGET', KEYS[1], 'open') == '1'
`

// barrierArrive: KEYS the barrier and its parties; ARGV n, party, TTL ms,
// publish command, channel. Returns 1 when open.
var barrierArrive = redis.NewScript(barrierHead + `
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), ARGV[2])
present = redis.call('ZCARD', KEYS[2])
if not open and present >= tonumber(ARGV[1]) then
  open = true
  redis.call(ARGV[4], ARGV[5], '*')
end
redis.call('HSET', KEYS[1], 'n', ARGV[1], 'open', open and '1' or '0')
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
local ms = math.max(1, tonumber(last[2]) - now)
redis.call('PEXPIRE', KEYS[1], ms)
redis.call('PEXPIRE', KEYS[2], ms)
return open and 1 or 0
`)

// barrierWithdraw: KEYS the barrier and its parties; ARGV n, party. Returns 1
// when open (the arrival stays).
var barrierWithdraw = redis.NewScript(barrierHead + `
if open then
  return 1
end
redis.call('ZREM', KEYS[2], ARGV[2])
if redis.call('ZCARD', KEYS[2]) == 0 then
  redis.call('DEL', KEYS[1])
end
return 0
`)

// barrierDepart: KEYS the barrier and its parties; ARGV n, party, publish
// command, channel. Returns the parties present and the ms until the first of
// them lapses.
var barrierDepart = redis.NewScript(barrierHead + `
local gone = redis.call('ZREM', KEYS[2], ARGV[2])
present = redis.call('ZCARD', KEYS[2])
if present == 0 then
  redis.call('DEL', KEYS[1])
  if gone == 1 then
    redis.call(ARGV[3], ARGV[4], '*')
  end
  return {0, 0}
end
local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
return {present, math.max(1, tonumber(first[2]) - now)}
`)

func barrierKeys(name string) []string {
	return []string{BarrierKey(name), BarrierKey(name) + ":parties"}
}

// CountDown implements driver.SyncDriver.
func (d *SyncDriver) CountDown(ctx context.Context, name string, n int, ttl time.Duration) (int, error) {
	c, err := latchCountDown.Run(ctx, d.rdb, []string{LatchKey(name)}, n, ttl.Milliseconds(), d.pub, syncChannel(name)).Int()
	return c, mapErr(err)
}

// LatchCount implements driver.SyncDriver.
func (d *SyncDriver) LatchCount(ctx context.Context, name string, n int, ttl time.Duration) (int, error) {
	c, err := latchCount.Run(ctx, d.rdb, []string{LatchKey(name)}, n, ttl.Milliseconds()).Int()
	return c, mapErr(err)
}

// Arrive implements driver.SyncDriver.
func (d *SyncDriver) Arrive(ctx context.Context, name, party string, n int, ttl time.Duration) (bool, error) {
	open, err := barrierArrive.Run(ctx, d.rdb, barrierKeys(name), n, party, ttl.Milliseconds(), d.pub, syncChannel(name)).Int()
	return open == 1, mapErr(err)
}

// Withdraw implements driver.SyncDriver.
func (d *SyncDriver) Withdraw(ctx context.Context, name, party string, n int) (bool, error) {
	open, err := barrierWithdraw.Run(ctx, d.rdb, barrierKeys(name), n, party).Int()
	return open == 1, mapErr(err)
}

// Depart implements driver.SyncDriver.
func (d *SyncDriver) Depart(ctx context.Context, name, party string, n int) (int, time.Duration, error) {
	r, err := barrierDepart.Run(ctx, d.rdb, barrierKeys(name), n, party, d.pub, syncChannel(name)).Int64Slice()
	if err != nil {
		return 0, 0, mapErr(err)
	}
	if len(r) != 2 {
		return 0, 0, fmt.Errorf("%w: redislock: barrier reply %v", driver.ErrRefused, r)
	}
	return int(r[0]), time.Duration(r[1]) * time.Millisecond, nil
}

// WatchSync implements driver.SyncDriver: a subscription of its own to the
// name's channel (sharded on Cluster), which wakes the waiter on every message
// and whenever it is confirmed (first, and again after a reconnection). A
// subscription the server refuses closes the channel, and the waiter polls.
// Through a redis.Ring it returns errors.ErrUnsupported.
func (d *SyncDriver) WatchSync(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	var ps *redis.PubSub
	switch r := d.rdb.(type) {
	case *redis.Ring:
		return nil, nil, fmt.Errorf("redislock: no notifications through a redis.Ring: %w", errors.ErrUnsupported)
	case *redis.ClusterClient:
		ps = r.SSubscribe(ctx, syncChannel(name))
	default:
		ps = d.rdb.Subscribe(ctx, syncChannel(name))
	}
	wake := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		backoff := 10 * time.Millisecond
		for {
			_, err := ps.Receive(context.Background())
			switch {
			case errors.Is(err, redis.ErrClosed):
				return
			case err != nil && refusal(err):
				close(wake)
				return
			case err != nil:
				// Dropped: go-redis subscribes again on the next Receive,
				// and the confirmation wakes the waiter.
				time.Sleep(backoff)
				backoff = min(2*backoff, time.Second)
				continue
			}
			backoff = 10 * time.Millisecond
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	}()
	var once sync.Once
	return wake, func() {
		once.Do(func() {
			_ = ps.Close()
			<-done
		})
	}, nil
}
