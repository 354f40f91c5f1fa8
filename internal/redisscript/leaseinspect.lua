-- Read a dlock lock with several holders (a semaphore or a read-write lock)
-- without changing it. leases.lua is prepended (after token.lua and fairlib.lua).
-- ARGV[1] the kind's marker field of the lock hash ('n' or 'rw')
-- Returns {marker value, holders, owner, token, metadata, pttl, last token,
-- waiters, writing}: the holder shown is the writer when one writes, else the
-- one whose lease ends last; waiters counts the queue (the semaphore's waiters,
-- the read-write lock's writers) and the read-write lock's waiting readers
-- (KEYS[7]); writing is 1 when a writer holds the lock.
local e = kind_error(ARGV[1])
if e then
  return e
end
local now = now_ms()
local f = redis.call('HMGET', KEYS[1], ARGV[1], 'wo')
local holders = redis.call('ZCOUNT', KEYS[6], '(' .. now, '+inf')
local waiters = 0
if redis.call('TYPE', KEYS[3])['ok'] == 'list' then
  waiters = redis.call('LLEN', KEYS[3])
end
if ARGV[1] == 'rw' then
  waiters = waiters + redis.call('ZCOUNT', KEYS[7], '(' .. now, '+inf')
end
local last = redis.call('GET', KEYS[2])
local o, s = nil, nil
if f[2] and redis.call('ZSCORE', KEYS[6], f[2]) then
  o, s = f[2], tonumber(redis.call('ZSCORE', KEYS[6], f[2]))
else
  local r = redis.call('ZRANGE', KEYS[6], -1, -1, 'WITHSCORES')
  o, s = r[1], tonumber(r[2])
end
if not o or s <= now then
  return {f[1], 0, false, false, false, -2, last, waiters, 0}
end
local v = redis.call('HMGET', KEYS[1], 't:' .. o, 'm:' .. o)
local writing = 0
if f[2] == o then
  writing = 1
end
return {f[1], holders, o, v[1], v[2], s - now, last, waiters, writing}
