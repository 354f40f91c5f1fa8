-- Remove every holder of a dlock lock with several holders, whoever they are,
-- and wake every waiter; the fence counter and the semaphore's queue stay.
-- leases.lua is prepended (after token.lua and fairlib.lua).
-- ARGV[1] the kind's marker field   ARGV[2] publish command ('' = none)
-- ARGV[3] wake channel
-- Returns the number of holders removed.
local e = kind_error(ARGV[1])
if e then
  return e
end
local n = redis.call('ZCOUNT', KEYS[6], '(' .. now_ms(), '+inf')
redis.call('DEL', KEYS[1], KEYS[6])
if ARGV[2] ~= '' then
  redis.pcall(ARGV[2], ARGV[3], '*')
end
return n
