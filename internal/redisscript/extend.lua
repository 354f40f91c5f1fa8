-- Reset the TTL of a dlock mutex if ARGV[1] owns it; never create it.
-- KEYS[1] lock hash   ARGV[1] owner   ARGV[2] ttl ms
-- Returns 1 when extended, 0 when not held by owner.
local owner = redis.call('HGET', KEYS[1], 'o')
if owner == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
local e = not_owned(owner)
if e then
  return e
end
return 0
