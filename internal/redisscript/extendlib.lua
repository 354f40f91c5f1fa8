-- Shared head of the scripts that extend holdings (after lib.lua).

-- extend_holding resets to ttl ms the TTL of owner's holding at key, and never
-- creates it: a plain mutex's lock record when plain is true, a lock hash
-- (field o = owner) otherwise. It returns 1 when extended, 0 when owner does
-- not hold it, and an error reply (a table with field err, not raised, so
-- that a script extending several holdings goes on) when key holds data that
-- is no lock of that kind. One read and one PEXPIRE.
local function extend_holding(key, owner, ttl, plain)
  if plain then
    local v = redis.pcall('GET', key)
    if type(v) == 'table' then
      return redis.error_reply('DLOCKCONFLICT key holds data that is not a dlock lock record')
    end
    if not v then
      return 0
    end
    local t, o, _, _, _, d = record(v)
    if not t then
      return not_record()
    end
    if o ~= owner or delaying(key, d) then
      return 0
    end
    if d and d > 0 then
      redis.call('PEXPIRE', key, tonumber(ttl) + d)
      return 1
    end
  else
    local o = redis.pcall('HGET', key, 'o')
    if type(o) == 'table' then
      return redis.error_reply('DLOCKCONFLICT key holds data that is not a dlock lock hash')
    end
    if o ~= owner then
      if not o and redis.call('EXISTS', key) == 1 then
        return conflict()
      end
      return 0
    end
  end
  redis.call('PEXPIRE', key, ttl)
  return 1
end
