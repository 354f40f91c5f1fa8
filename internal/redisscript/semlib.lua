-- Shared head of the semaphore's scripts, prepended after leases.lua.
-- KEYS[7] the stored size: a hash of n, the size in force (set by
-- semresize.lua, kept until deleted), and i, the size before the first resize
-- when known.

-- The size in force, in decimal: the stored size, else the holders' (the lock
-- hash's field n), else nil.
local function size_in_force()
  return redis.call('HGET', KEYS[7], 'n') or redis.call('HGET', KEYS[1], 'n')
end

-- The size a Client made with mine permits ('0': it adopts the stored size)
-- takes permits under, or nil when it disagrees: with a stored size, mine must
-- be that size or the size before the first resize (the first Client's that
-- comes when it was not known at the resize); without, the holders'.
local function semaphore_size(mine)
  local s = redis.call('HMGET', KEYS[7], 'n', 'i')
  if s[1] then
    if mine ~= '0' and not s[2] then
      redis.call('HSET', KEYS[7], 'i', mine)
    elseif mine ~= '0' and mine ~= s[1] and mine ~= s[2] then
      return nil
    end
    return s[1]
  end
  local held = redis.call('HGET', KEYS[1], 'n')
  if mine == '0' then
    return held
  end
  if held and held ~= mine then
    return nil
  end
  return mine
end
