-- Time left on a dlock mutex, if ARGV[1] owns it.
-- KEYS[1] lock hash   ARGV[1] owner
-- Returns the PTTL in ms, or -2 when not held by owner.
local owner = redis.call('HGET', KEYS[1], 'o')
if owner == ARGV[1] then
  return redis.call('PTTL', KEYS[1])
end
local e = not_owned(owner)
if e then
  return e
end
return -2
