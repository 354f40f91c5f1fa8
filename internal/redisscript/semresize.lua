-- Set the size of a dlock semaphore (token.lua, fairlib.lua, leases.lua and
-- semlib.lua are prepended): store it in KEYS[7], for every Client from then
-- on, and hand the permits it frees to the head of the queue, waking each by
-- name. Holders above a lowered size keep their permits.
-- ARGV[1] the new size   ARGV[2] the resizing Client's number ('0': it adopts)
-- ARGV[3] claim time ms (see semacquire.lua)   ARGV[4] fence retention ms
-- ARGV[5] publish command ('PUBLISH', 'SPUBLISH' or '')   ARGV[6] wake channel
-- Returns the size before, 0 when there was none.
local e = kind_error('n')
if e then
  return e
end
local s = redis.call('HMGET', KEYS[7], 'n', 'i')
local held = redis.call('HGET', KEYS[1], 'n')
local before = s[1] or held
local initial = s[2] or held
if not initial and ARGV[2] ~= '0' then
  initial = ARGV[2]
end
redis.call('HSET', KEYS[7], 'n', ARGV[1])
if initial then
  redis.call('HSET', KEYS[7], 'i', initial)
end
redis.call('HSET', KEYS[1], 'n', ARGV[1])
local now = now_ms()
drop_dead(now)
hand_out(tonumber(ARGV[1]) - redis.call('ZCARD', KEYS[6]), nil, now, ARGV[3], ARGV[4], ARGV[5], ARGV[6])
settle(now)
return tonumber(before or '0')
