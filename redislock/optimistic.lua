-- Write a versioned value only if its version is still the one the caller read.
-- KEYS[1] value hash (fields v = value, n = version)
-- ARGV[1] expected version ('0' = the value does not exist yet)   ARGV[2] new value
-- ARGV[3] ttl ms ('0' = none)
-- Returns {1, new version} when written, {0, current version, current value}
-- when the version has moved on (nothing is changed).
local cur = redis.call('HMGET', KEYS[1], 'n', 'v')
if not cur[1] and redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.error_reply('DLOCKCONFLICT key holds a hash that is not a dlock versioned value')
end
local n = tonumber(cur[1] or '0')
if n ~= tonumber(ARGV[1]) then
  return {0, n, cur[2]}
end
n = n + 1
redis.call('HSET', KEYS[1], 'v', ARGV[2], 'n', n)
if ARGV[3] ~= '0' then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return {1, n}
