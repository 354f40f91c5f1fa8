-- Take the legacy lock if it is free or its stamp has run out, in one step
-- (the SETNX, GET and GETSET of the recipes, made atomic).
-- ARGV[6] ttl ms   ARGV[7] '1' to set the real expiry   ARGV[8] fence retention ms
-- ARGV[9] metadata ('' = none)   ARGV[10] the lock's name (as dlock was given it)
-- Returns {1, token, stamp} when taken (also when ARGV[5] holds it already: a
-- retry), {0, remaining ms, foreign} when held, where foreign is 1 when the
-- holder is not a dlock locker.
local now = now_ms()
local cur = redis.call('GET', KEYS[1])
local old = nil
if cur then
  old = stamp(cur)
  if not old then
    return conflict(cur)
  end
  if live(old, now) then
    local h = redis.call('HMGET', KEYS[2], 'o', 'v', 't')
    if h[1] == ARGV[5] and h[2] == cur then
      -- Already ours: a retry whose earlier attempt landed. Renew it as
      -- extend.lua does, and hand back its token.
      local n = math.floor((now + tonumber(ARGV[6])) / unit) + 1
      if n < old then
        n = old
      end
      write(n, now, ARGV[7])
      redis.call('HSET', KEYS[2], 'v', fmt(n))
      redis.call('PEXPIRE', KEYS[2], ARGV[8])
      return {1, tonumber(h[3]), fmt(n)}
    end
    local foreign = 1
    if h[1] and h[2] == cur then
      foreign = 0
    end
    return {0, left(old, now), foreign}
  end
end
-- The recipes' stamp: the time the lock runs out, plus one unit. It is above the
-- run-out stamp it replaces (kept so even for a clock far behind).
local s = math.floor((now + tonumber(ARGV[6])) / unit) + 1
if old and s <= old then
  s = old + 1
end
-- Fencing token: token_after (internal/redisscript/token.lua, prepended to
-- this script) over the last token, kept in field t of the companion hash and
-- written in the one HSET below that records the whole holding, so that
-- inspect.lua reads the holding and its token in one HMGET.
local token = token_after(tonumber(redis.call('HGET', KEYS[2], 't') or '0'), redis.call('TIME'))
write(s, now, ARGV[7])
redis.call('HDEL', KEYS[2], 'm')
local fields = {'o', ARGV[5], 'v', fmt(s), 't', fmt(token), 'k', ARGV[10]}
if ARGV[9] ~= '' then
  fields[#fields + 1] = 'm'
  fields[#fields + 1] = ARGV[9]
end
redis.call('HSET', KEYS[2], unpack(fields))
redis.call('PEXPIRE', KEYS[2], ARGV[8])
return {1, token, fmt(s)}
