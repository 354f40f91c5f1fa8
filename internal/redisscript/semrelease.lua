-- Give back a permit of a dlock semaphore held by ARGV[1], and hand the permits
-- that are free to the head of the queue; in every case take ARGV[1] out of the
-- queue (a waiter giving up). token.lua, fairlib.lua, leases.lua and semlib.lua
-- are prepended; KEYS[7] is the stored size (see semacquire.lua).
-- ARGV[1] owner   ARGV[2] fence retention ms   ARGV[3] claim time ms
-- ARGV[4] publish command ('PUBLISH', 'SPUBLISH' or '')   ARGV[5] wake channel
-- ARGV[6] '' for a release; for an abandoned acquisition, the lifetime (ms) of
-- the owner's abandon mark KEYS[5] (see semacquire.lua; '0' = no mark)
-- Returns 1 when a permit was given back, 0 when owner held none.
if ARGV[6] ~= '' then
  if ARGV[6] ~= '0' then
    redis.call('SET', KEYS[5], '1', 'PX', ARGV[6])
  end
end
local e = kind_error('n')
if e then
  return e
end
dequeue(ARGV[1])
local now = now_ms()
drop_dead(now)
local held = unhold(ARGV[1])
local n = tonumber(size_in_force())
if n then
  hand_out(n - redis.call('ZCARD', KEYS[6]), nil, now, ARGV[3], ARGV[2], ARGV[4], ARGV[5])
end
settle(now)
if held then
  return 1
end
return 0
