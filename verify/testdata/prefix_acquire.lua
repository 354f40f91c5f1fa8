-- Take a plain dlock mutex if it is free, in one step. The lock is one string,
-- its lock record (see lib.lua).
-- KEYS[1] lock record   KEYS[2] fence counter of the other lock kinds
-- KEYS[3] the owner's abandon mark
-- KEYS[4] waiting processes: sorted set of hub ids by arrival (server ms)
--         (all in one hash slot)
-- ARGV[1] owner       ARGV[2] ttl ms   ARGV[3] unused   ARGV[4] metadata ('' = none)
-- ARGV[5] '1' when the caller waits if the lock is held: the holding is marked
--         ('+') so that its release wakes a waiting process, and the caller's
--         process (hub ARGV[7]) joins KEYS[4] with score ARGV[8] ('' = now)
-- ARGV[6] '1' when other waiters of the caller's process wait: the new holding is
--         marked at once and the process goes to the back of KEYS[4]
-- ARGV[7] the caller's hub id ('' when it does not join)   ARGV[8] its arrival score
--         ('' when it has none: its score is then the holder's token, so that the
--         set orders processes by the holding they found)
-- ARGV[9] '1' when the hub is in KEYS[4]: it leaves it when it takes the lock
--         and has no other waiter; '2' when a release took it off KEYS[4] to
--         wake it. Either way its holding is marked: other processes may wait.
-- Returns {1, token} when taken (also when the owner holds it already: a retry
-- whose earlier attempt landed; its TTL is reset), {1, token, score} when taken
-- and the process went to the back of KEYS[4] with that score, {0, pttl, score}
-- when held by another owner (score: the hub's arrival, '' when not waiting),
-- {2, 0} when the owner's acquisition was abandoned (abandon.lua).
--
-- The token is one above the record's; without a record (never taken, or its
-- last holding's TTL ran out) it is the server time in microseconds, or one above
-- the other kinds' fence counter when that is ahead. Tokens stay below the
-- server clock but for bursts of more than one acquisition per microsecond, so
-- a token drawn from the clock is above every earlier one. The free path with
-- a record makes two calls (MGET, SET), without one four (TYPE of the fence
-- counter when there is none, TIME).

-- taken updates the waiting set once the caller's process has the lock with
-- token t: back of the set if others of it wait (its score, returned, is t),
-- off it otherwise.
local function taken(t)
  if ARGV[7] == '' then
    return nil
  end
  if ARGV[6] == '1' then
    local score = string.format('%.0f', t)
    redis.call('ZADD', KEYS[4], score, ARGV[7])
    redis.call('PEXPIRE', KEYS[4], tonumber(ARGV[2]) + 1000)
    return score
  elseif ARGV[9] == '1' then
    redis.call('ZREM', KEYS[4], ARGV[7])
  end
  return nil
end

-- granted is the reply of a grant of token t.
local function granted(t)
  local score = taken(t)
  if score then
    return {1, t, score}
  end
  return {1, t}
end

local r = redis.call('MGET', KEYS[1], KEYS[3], KEYS[2])
local v = r[1]
local token, owner, waited
if v then
  token, owner, waited = record(v)
  if not token then
    return not_record()
  end
end

if owner == ARGV[1] then
  -- A retry whose earlier attempt landed.
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if ARGV[6] == '1' and not waited then
    redis.call('SET', KEYS[1], '+' .. string.sub(v, 2), 'KEEPTTL')
  end
  return granted(token)
end

if owner then
  local pttl = redis.call('PTTL', KEYS[1])
  local score = ''
  if ARGV[5] == '1' then
    if not waited then
      redis.call('SET', KEYS[1], '+' .. string.sub(v, 2), 'KEEPTTL')
    end
    if ARGV[7] ~= '' then
      score = ARGV[8]
      if score == '' then
        -- Arrivals are ordered by the holding they find: the holder's token.
        score = string.format('%.0f', token)
      end
      redis.call('ZADD', KEYS[4], 'NX', score, ARGV[7])
      -- Every waiter comes back by the holder's expiry, and joins again then.
      redis.call('PEXPIRE', KEYS[4], math.max(pttl, 0) + 1000)
    end
  end
  return {0, pttl, score}
end

if r[2] then
  return {2, 0}
end

if token then
  token = token + 1
else
  if not r[3] and redis.call('TYPE', KEYS[2])['ok'] ~= 'none' then
    return redis.error_reply('DLOCKCONFLICT the fence counter holds data that is not a dlock counter')
  end
  local now = redis.call('TIME')
  token = tonumber(now[1]) * 1000000 + tonumber(now[2])
  local fence = tonumber(r[3] or '0')
  if fence and fence >= token then
    token = fence + 1
  end
end
-- A process that was on the waiting set marks its holding: others of it may
-- still be there, and its release must wake the next.
local rec = held_record(b36(token), ARGV[1], ARGV[4], ARGV[6] == '1' or ARGV[9] ~= '0')
if v then
  redis.call('SET', KEYS[1], rec, 'PX', ARGV[2])
elseif not redis.call('SET', KEYS[1], rec, 'NX', 'PX', ARGV[2]) then
  -- The key holds another kind of lock (a hash), or foreign data.
  local o = redis.pcall('HGET', KEYS[1], 'o')
  if type(o) == 'string' then
    return {0, redis.call('PTTL', KEYS[1]), ''}
  end
  return redis.error_reply('DLOCKCONFLICT key holds data that is not a dlock lock')
end
return granted(token)
