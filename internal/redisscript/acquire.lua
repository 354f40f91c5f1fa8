-- Take a dlock mutex if it is free, in one step (token.lua is prepended).
-- KEYS[1] lock hash   KEYS[2] fence counter   KEYS[3] the owner's abandon mark
-- KEYS[4] waiting processes: sorted set of hub ids by arrival (server ms)
--         (all in one hash slot)
-- ARGV[1] owner       ARGV[2] ttl ms   ARGV[3] fence retention ms   ARGV[4] metadata ('' = none)
-- ARGV[5] '1' when the caller waits if the lock is held: the holding is marked
--         (field w) so that its release wakes a waiting process, and the caller's
--         process (hub ARGV[7]) joins KEYS[4] with score ARGV[8] ('' = now)
-- ARGV[6] '1' when other waiters of the caller's process wait: the new holding is
--         marked (field w) at once and the process goes to the back of KEYS[4]
-- ARGV[7] the caller's hub id ('' when it does not join)   ARGV[8] its arrival score
-- ARGV[9] '1' when the hub is in KEYS[4]: it leaves it when it takes the lock
--         and has no other waiter
-- Hash fields: o owner, t fencing token, m metadata, w waiters may wait (optional).
-- Returns {1, token} when taken (also when the owner holds it already: a retry
-- whose earlier attempt landed; its TTL is reset), {0, pttl, score} when held by
-- another owner (score: the hub's arrival, '' when not waiting), {2, 0} when the
-- owner's acquisition was abandoned (abandon.lua).
-- The free path with nobody waiting makes five calls: every call a script makes
-- costs about as much as a command of its own.

-- taken updates the waiting set once the caller's process has the lock (token t,
-- in decimal): back of the set if others of it wait, off it otherwise.
local function taken(t)
  if ARGV[7] == '' then
    return
  end
  if ARGV[6] == '1' then
    redis.call('ZADD', KEYS[4], string.sub(t, 1, -4), ARGV[7]) -- ms
    redis.call('PEXPIRE', KEYS[4], tonumber(ARGV[2]) + 1000)
  elseif ARGV[9] == '1' then
    redis.call('ZREM', KEYS[4], ARGV[7])
  end
end

-- grant makes the caller the holder; w marks the holding as waited for.
local function grant(w)
  local token, t = next_token(KEYS[2], ARGV[3]) -- see token.lua
  local fields = {'o', ARGV[1], 't', t}
  if ARGV[4] ~= '' then
    fields[#fields + 1] = 'm'
    fields[#fields + 1] = ARGV[4]
  end
  if w then
    fields[#fields + 1] = 'w'
    fields[#fields + 1] = '1'
  end
  taken(t)
  redis.call('HSET', KEYS[1], unpack(fields))
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, token}
end

if redis.call('EXISTS', KEYS[1], KEYS[3], KEYS[4]) == 0 then
  -- Free, not abandoned, and no process waits.
  return grant(ARGV[6] == '1')
end
local f = redis.call('HMGET', KEYS[1], 'o', 't')
if f[1] == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if ARGV[6] == '1' then
    redis.call('HSET', KEYS[1], 'w', '1')
  end
  taken(f[2])
  return {1, tonumber(f[2])}
end
if not f[1] then
  if redis.call('EXISTS', KEYS[1], KEYS[3]) > 0 then
    if redis.call('EXISTS', KEYS[1]) == 1 then
      return conflict()
    end
    return {2, 0}
  end
  -- Free while processes wait: the holding wakes the next of them on release.
  return grant(true)
end
local pttl = redis.call('PTTL', KEYS[1])
local score = ''
if ARGV[5] == '1' then
  redis.call('HSET', KEYS[1], 'w', '1')
  if ARGV[7] ~= '' then
    score = ARGV[8]
    if score == '' then
      local now = redis.call('TIME')
      score = now[1] .. string.sub('00' .. math.floor(now[2] / 1000), -3)
    end
    redis.call('ZADD', KEYS[4], 'NX', score, ARGV[7])
    -- Every waiter comes back by the holder's expiry, and joins again then.
    redis.call('PEXPIRE', KEYS[4], math.max(pttl, 0) + 1000)
  end
end
return {0, pttl, score}
