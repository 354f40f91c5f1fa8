-- Take a plain dlock mutex if it is free, in one step. The lock is one string,
-- its lock record (see lib.lua).
-- KEYS[1] lock record   KEYS[2] fence counter of the other lock kinds
-- KEYS[3] the owner's abandon mark
-- KEYS[4] waiting processes: sorted set of hub ids by arrival (server ms)
--         (all in one hash slot)
-- ARGV[1] owner       ARGV[2] ttl ms   ARGV[4] metadata ('' = none)
-- ARGV[3] '1' when a holding of the owner is taken anew, with a new token, rather
--         than returned (Redlock: a clean-up of an earlier attempt, which removes
--         only the holding with that attempt's token, then leaves it alone)
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
-- ARGV[10] the holding's lock-delay in ms ('0' or absent: none): the record
--         says it, and the key lives that much past the TTL (see lib.lua). A
--         key in its lock-delay is refused to every owner as a held one, with
--         the delay's time left.
-- Returns the token when taken (also when the owner holds it already: a retry
-- whose earlier attempt landed; its TTL is reset, and its token kept unless
-- ARGV[3] is '1'), {1, token, score} when taken
-- and the process went to the back of KEYS[4] with that score, {0, pttl, score}
-- when held by another owner (score: the hub's arrival, '' when not waiting),
-- {2, 0} when the owner's acquisition was abandoned (abandon.lua).
--
-- The token is the server time in microseconds, or one above the newest token
-- the key remembers (the record's, or the other kinds' fence counter) when that
-- is not below the clock: above every token handed out before, even when a crash
-- or a failover lost the grants that drew them, as long as the server's clock is
-- ahead of the clock that drew them (see docs/safety.md). The free path with a
-- record makes three calls (MGET, TIME, SET), without one four (TYPE of the
-- fence counter when there is none).

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

-- granted is the reply of a grant of token t: t alone, or {1, t, score} when
-- the process went to the back of the waiting set with that score.
local function granted(t)
  local score = taken(t)
  if score then
    return {1, t, score}
  end
  return t
end

local r = redis.call('MGET', KEYS[1], KEYS[3], KEYS[2])
local v = r[1]
local token, owner, waited, _, delay
if v then
  token, owner, waited, _, _, delay = record(v)
  if not token then
    return not_record()
  end
  local left = delaying(KEYS[1], delay)
  if left then
    return {0, left, ''}
  end
end
local ask = tonumber(ARGV[10] or '0') or 0

local mine = owner == ARGV[1]
if mine and ARGV[3] ~= '1' then
  -- A retry whose earlier attempt landed.
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) + math.max(delay or 0, 0))
  if ARGV[6] == '1' and not waited then
    redis.call('SET', KEYS[1], '+' .. string.sub(v, 2), 'KEEPTTL')
  end
  return granted(token)
end

if owner and not mine then
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

if r[2] and not mine then
  return {2, 0}
end

-- The token is above the server clock in microseconds and above every token the
-- key's state remembers. The clock is read even when a record is there: state
-- restored from an older save or promoted from a lagging replica may remember a
-- token below one already handed out, which only the clock then exceeds.
if not token and not r[3] and redis.call('TYPE', KEYS[2])['ok'] ~= 'none' then
  return redis.error_reply('DLOCKCONFLICT the fence counter holds data that is not a dlock counter')
end
local now = redis.call('TIME')
local clock = tonumber(now[1]) * 1000000 + tonumber(now[2])
if not token or token < clock then
  token = clock
else
  token = token + 1
end
local fence = counter(r[3] or '0')
if not fence then
  return redis.error_reply('DLOCKCONFLICT the fence counter holds data that is not a dlock counter')
end
if fence >= token then
  token = fence + 1
end
-- A process that was on the waiting set marks its holding: others of it may
-- still be there, and its release must wake the next. A holding taken anew
-- keeps its mark.
local rec = held_record(b36(token), ARGV[1], ARGV[4], ARGV[6] == '1' or ARGV[9] ~= '0' or (mine and waited), ask)
local px = tonumber(ARGV[2]) + ask
if v then
  redis.call('SET', KEYS[1], rec, 'PX', px)
elseif not redis.call('SET', KEYS[1], rec, 'NX', 'PX', px) then
  -- The key holds another kind of lock (a hash), or foreign data.
  local o = redis.pcall('HGET', KEYS[1], 'o')
  if type(o) == 'string' then
    return {0, redis.call('PTTL', KEYS[1]), ''}
  end
  return redis.error_reply('DLOCKCONFLICT key holds data that is not a dlock lock')
end
return granted(token)
