-- Time left on a dlock mutex, if ARGV[1] owns it.
-- KEYS[1] lock key   ARGV[1] owner
-- ARGV[2] '1' for the plain mutex's lock record, absent for a lock hash
-- Returns the PTTL in ms, or -2 when not held by owner.
local owner
if ARGV[2] == '1' then
  local v = redis.call('GET', KEYS[1])
  if v then
    local t, o, _, _, _, d = record(v)
    if not t then
      return not_record()
    end
    if o == ARGV[1] and d then
      -- A holding with a lock-delay: the key lives d ms past it.
      local left, pttl = delaying(KEYS[1], d)
      if left then
        return -2
      end
      return pttl - d
    end
    owner = o
  end
else
  owner = redis.call('HGET', KEYS[1], 'o')
  local e = not_owned(owner)
  if e then
    return e
  end
end
if owner == ARGV[1] then
  return redis.call('PTTL', KEYS[1])
end
return -2
