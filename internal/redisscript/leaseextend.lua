-- Reset the lease of holder ARGV[1] of a lock with several holders to ARGV[2] ms;
-- never re-create it. leases.lua is prepended (after token.lua and fairlib.lua).
-- ARGV[3] the kind's marker field of the lock hash
-- ARGV[4] (a resume of a detached holding only) the holding's fencing token,
-- in decimal: the lease is extended only if ARGV[1] holds it with that token.
-- Returns 1 when extended, 0 when ARGV[1] holds no lease (with that token).
local e = kind_error(ARGV[3])
if e then
  return e
end
local now = now_ms()
if not lease_end(ARGV[1], now) then
  return 0
end
if ARGV[4] and redis.call('HGET', KEYS[1], 't:' .. ARGV[1]) ~= ARGV[4] then
  return 0
end
-- The lease's end is removed before the new one is written: a server out of
-- memory refuses a script's first write that may grow it (ZADD), not a ZADD
-- after a ZREM, and renewals must go on on a full server (see lib.lua).
redis.call('ZREM', KEYS[6], ARGV[1])
redis.call('ZADD', KEYS[6], now + tonumber(ARGV[2]), ARGV[1])
local keep = tonumber(redis.call('HGET', KEYS[1], 'ww'))
settle(now, keep)
return 1
