-- Take a dlock mutex if it is free, in one step (token.lua is prepended).
-- KEYS[1] lock hash   KEYS[2] fence counter   KEYS[3] the owner's abandon mark
--         (all in one hash slot)
-- ARGV[1] owner       ARGV[2] ttl ms   ARGV[3] fence retention ms   ARGV[4] metadata ('' = none)
-- ARGV[5] '1' when the caller waits if the lock is held: the holding is marked
--         (field w) so that its release wakes the waiters
-- ARGV[6] '1' when other waiters of the caller's process wait: the new holding is
--         marked (field w) at once
-- Hash fields: o owner, t fencing token, m metadata, w waiters may wait (optional).
-- Returns {1, token} when taken (also when the owner holds it already: a retry
-- whose earlier attempt landed; its TTL is reset), {0, pttl} when held by another
-- owner, {2, 0} when the owner's acquisition was abandoned (abandon.lua).
-- The free path makes four calls: every call a script makes costs about as much
-- as a command of its own.
if redis.call('EXISTS', KEYS[1], KEYS[3]) == 0 then
  local token, t = next_token(KEYS[2], ARGV[3]) -- see token.lua
  local fields = {'o', ARGV[1], 't', t}
  if ARGV[4] ~= '' then
    fields[#fields + 1] = 'm'
    fields[#fields + 1] = ARGV[4]
  end
  if ARGV[6] == '1' then
    fields[#fields + 1] = 'w'
    fields[#fields + 1] = '1'
  end
  redis.call('HSET', KEYS[1], unpack(fields))
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, token}
end
local f = redis.call('HMGET', KEYS[1], 'o', 't')
if f[1] == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(f[2])}
end
if not f[1] then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    return redis.error_reply('DLOCKCONFLICT key holds a hash that is not a dlock lock')
  end
  return {2, 0}
end
if ARGV[5] == '1' then
  redis.call('HSET', KEYS[1], 'w', '1')
end
return {0, redis.call('PTTL', KEYS[1])}
