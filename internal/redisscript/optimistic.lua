-- Write a versioned value only if its version is still the one the caller read
-- (token.lua is prepended).
-- KEYS[1] value hash (fields v = value, n = version)   KEYS[2] the key's fence counter
-- ARGV[1] expected version ('0' = the value does not exist yet)   ARGV[2] new value
-- ARGV[3] ttl ms ('0' = none)   ARGV[4] fence counter retention ms
-- A new version is a fencing token drawn from KEYS[2], which outlives the value:
-- versions never repeat for a key, also after the value was deleted or expired
-- and written again (a writer that read the old value cannot overwrite the new
-- one). Returns {1, new version} when written, {0, current version, current value}
-- when the version has moved on (nothing is changed).
local cur = redis.call('HMGET', KEYS[1], 'n', 'v')
if redis.call('EXISTS', KEYS[1]) == 1 then
  -- a version is a decimal integer of at most 2^53 (exact as a Lua number)
  if not cur[1] or not string.match(cur[1], '^%d+$') or #cur[1] > 16
      or tonumber(cur[1]) > 9007199254740992 or redis.call('HLEN', KEYS[1]) > 2 then
    return conflict('versioned value')
  end
end
local n = tonumber(cur[1] or '0')
if n ~= tonumber(ARGV[1]) then
  return {0, n, cur[2]}
end
local token, t = next_token(KEYS[2], ARGV[4]) -- see token.lua
if token <= n then -- the counter was lost and the clock stepped back
  token = n + 1
  t = string.format('%.0f', token)
  redis.call('SET', KEYS[2], t, 'PX', ARGV[4])
end
redis.call('HSET', KEYS[1], 'v', ARGV[2], 'n', t)
if ARGV[3] ~= '0' then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return {1, token}
