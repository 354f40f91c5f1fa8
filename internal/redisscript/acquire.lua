-- Take a dlock mutex if it is free, in one step.
-- KEYS[1] lock hash   KEYS[2] fence counter (same hash slot)
-- ARGV[1] owner       ARGV[2] ttl ms   ARGV[3] fence retention ms   ARGV[4] metadata ('' = none)
-- ARGV[5] '1' when the caller waits if the lock is held: the holding is marked
--         (field w) so that its release wakes the waiters
-- ARGV[6] '1' when other waiters of the caller's process wait: the new holding is
--         marked (field w) at once
-- Hash fields: o owner, t fencing token, m metadata, w waiters may wait (optional).
-- Returns {1, token} when taken, {0, pttl} when held by another owner.
local owner = redis.call('HGET', KEYS[1], 'o')
if owner then
  if ARGV[5] == '1' then
    redis.call('HSET', KEYS[1], 'w', '1')
  end
  return {0, redis.call('PTTL', KEYS[1])}
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.error_reply('DLOCKCONFLICT key holds a hash that is not a dlock lock')
end
-- The fencing token is max(last + 1, server time in microseconds): strictly
-- increasing while the counter lives, and still increasing after the counter is
-- lost (restart without persistence, eviction, deletion) as long as the server
-- clock does not step back.
local now = redis.call('TIME')
local token = tonumber(now[1]) * 1000000 + tonumber(now[2])
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
if last and last >= token then
  token = last + 1
end
local t = string.format('%.0f', token)
redis.call('SET', KEYS[2], t, 'PX', ARGV[3])
local fields = {'o', ARGV[1], 't', t}
if ARGV[4] ~= '' then
  fields[#fields + 1] = 'm'
  fields[#fields + 1] = ARGV[4]
end
if ARGV[6] == '1' then
  fields[#fields + 1] = 'w'
  fields[#fields + 1] = '1'
end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, token}
