-- Take a fair (FIFO) dlock mutex: granted only to the head of its queue.
-- ARGV[1] owner   ARGV[2] ttl ms   ARGV[3] metadata
-- ARGV[4] '1' to join the queue (or refresh the entry) when not taken
-- ARGV[5] queue entry lifetime ms, also the time a head has to claim a hand-over
-- ARGV[6] publish command ('PUBLISH', 'SPUBLISH' or '')   ARGV[7] wake channel
-- ARGV[8] the caller's queue entry: its Client id (16 characters) and ARGV[1];
--         KEYS[4] is its key (see fairmutex.lua)
-- A lock handed over to this owner by a release is claimed: its TTL is set to
-- ARGV[2], its metadata to ARGV[3] (when given).
-- Returns {1, token} when taken, {0, pttl} otherwise (pttl -1 when queued: a
-- queued waiter is woken by the hand-over), {2, 0} when the owner's
-- acquisition was abandoned.
-- Free, from a released record: three calls (MGET, TIME, SET). A claim after a
-- hand-over: two. Joining the queue behind a holder: four.

local r = redis.call('MGET', KEYS[1], KEYS[5], KEYS[2])
local v = r[1]
local token, owner, waited, meta, t36
if v then
  token, owner, waited, meta, t36 = record(v)
  if not token then
    return not_record()
  end
end

if owner and owner == ARGV[1] then
  -- Handed over to the caller, or a retry whose earlier attempt landed.
  if ARGV[3] ~= '' then
    meta = ARGV[3]
  end
  redis.call('SET', KEYS[1], held_record(t36, owner, meta, waited), 'PX', ARGV[2])
  return {1, token}
end
if r[2] then
  return {2, 0}
end

if not v then
  -- No record: the key is free, or holds another kind of lock (a hash), or
  -- foreign data.
  local kind = redis.call('TYPE', KEYS[1])['ok']
  if kind ~= 'none' then
    local o = redis.pcall('HGET', KEYS[1], 'o')
    if type(o) == 'string' then
      return {0, redis.call('PTTL', KEYS[1])}
    end
    return redis.error_reply('DLOCKCONFLICT key holds data that is not a dlock lock')
  end
  if not r[3] and redis.call('TYPE', KEYS[2])['ok'] ~= 'none' then
    return redis.error_reply('DLOCKCONFLICT the fence counter holds data that is not a dlock counter')
  end
end

if not owner then
  -- Free. Waiters may queue when there is no record (a holding expired) or a
  -- released one marked '+': the lock is then the first live one's.
  local head, more
  if not v or waited then
    refuse_full(KEYS[5]) -- the pop writes first (see lib.lua)
    head, more = pop_waiting()
  end
  local t = draw(token, r[3])
  if not t then
    return redis.error_reply('DLOCKCONFLICT the fence counter holds data that is not a dlock counter')
  end
  if not head or head == ARGV[8] then
    redis.call('SET', KEYS[1], held_record(b36(t), ARGV[1], ARGV[3], more), 'PX', ARGV[2])
    return {1, t}
  end
  give(head, t, ARGV[5], ARGV[6], ARGV[7])
  waited = true
end

if ARGV[4] == '1' then
  if not redis.call('SET', KEYS[4], '1', 'PX', ARGV[5], 'GET') then
    redis.call('RPUSH', KEYS[3], ARGV[8]) -- a new entry, else a refreshed one
  end
  redis.call('PEXPIRE', KEYS[3], ARGV[5])
  if not waited then
    redis.call('SET', KEYS[1], '+' .. string.sub(v, 2), 'KEEPTTL') -- the release looks at the queue
  end
  return {0, -1}
end
return {0, redis.call('PTTL', KEYS[1])}
