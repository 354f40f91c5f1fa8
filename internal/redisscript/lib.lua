-- The checks every dlock script shares; prepended to each script.

-- conflict returns the error reply of a key that holds a hash that is not a
-- dlock what ('lock' when nil).
local function conflict(what)
  return redis.error_reply('DLOCKCONFLICT key holds a hash that is not a dlock ' .. (what or 'lock'))
end

-- not_owned returns the error reply of a lock hash KEYS[1] that exists without
-- an owner (owner, its field o, is false): foreign data; nil otherwise, when the
-- lock is free or held by another owner.
local function not_owned(owner)
  if not owner and redis.call('EXISTS', KEYS[1]) == 1 then
    return conflict()
  end
  return nil
end

-- extend_holding resets the TTL of the lock hash key to ttl ms if owner holds
-- it, and never creates it. It returns 1 when extended, 0 when the lock is free
-- or another owner's, and an error reply when key holds foreign data (a hash
-- without an owner, or another type). One mutex's extend, whether alone
-- (extend.lua) or one of many (extendmany.lua).
local function extend_holding(key, owner, ttl)
  local o = redis.pcall('HGET', key, 'o')
  if type(o) == 'table' then
    return o
  end
  if o == owner then
    redis.call('PEXPIRE', key, ttl)
    return 1
  end
  if not o and redis.call('EXISTS', key) == 1 then
    return conflict()
  end
  return 0
end
