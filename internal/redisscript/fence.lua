-- Write a resource only if the caller's fencing token is not older than the newest
-- token that wrote it, and remember the token: one step, one hash slot.
-- KEYS[1] fence record (hash: k = lock key, t = newest token)   KEYS[2] resource
-- ARGV[1] lock key   ARGV[2] token (decimal, no leading zeros)   ARGV[3] set|incrby|del
-- ARGV[4] value (set) or increment (incrby)   ARGV[5] resource ttl ms, '0' = none (set)
-- ARGV[6] record retention ms
-- Returns {1, result} when written (set: 1, incrby: new value, del: keys deleted),
-- {0, newest token} when the token is stale, {2, lock key} when another lock
-- fences the resource. Nothing is changed unless the first element is 1.

-- a < b for unsigned decimal integers of any size (never as doubles or strings).
local function older(a, b)
  if #a ~= #b then
    return #a < #b
  end
  return a < b
end

local rec = redis.call('HMGET', KEYS[1], 'k', 't')
if rec[1] and rec[1] ~= ARGV[1] then
  return {2, rec[1]}
end
if rec[2] and older(ARGV[2], rec[2]) then
  return {0, rec[2]}
end
local op, res = ARGV[3], 1
if op == 'set' then
  if ARGV[5] ~= '0' then
    redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[5])
  else
    redis.call('SET', KEYS[2], ARGV[4])
  end
elseif op == 'incrby' then
  res = redis.call('INCRBY', KEYS[2], ARGV[4])
elseif op == 'del' then
  res = redis.call('DEL', KEYS[2])
else
  return redis.error_reply('ERR dlock: unknown fenced operation')
end
redis.call('HSET', KEYS[1], 'k', ARGV[1], 't', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
return {1, res}
