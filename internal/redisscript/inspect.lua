-- Read a dlock mutex without changing it.
-- KEYS[1] lock key   KEYS[2] fence counter   KEYS[3] fair-lock queue
-- KEYS[4] the plain lock's waiting processes (see acquire.lua) (same hash slot)
-- Returns {owner, token, metadata, pttl, last token, queued, record, delay}; owner, token,
-- metadata and last token are nil when absent, pttl is -2 when the lock is free,
-- queued is the length of the fair-lock queue, or for a plain mutex the number
-- of processes on its waiting set. A lock record (a string, see lib.lua: the
-- plain and the fair mutex's) is read as well as a lock hash (record is then 1,
-- else 0, and 0 for a record with a fair-lock queue); its last token is the
-- record's. delay is the ms left of a plain lock's lock-delay (0: none); pttl
-- is then -2, and the holding's own PTTL (without the delay) else. A plain
-- lock's waiting processes are those whose own wake channel (the lock's
-- channel, ':' and the Client id) has a subscriber, plain or sharded: a
-- process that died while waiting is on the set until a release drops it (see
-- wake.lua), and is not counted (of the first 100; the rest are).

-- live_waiting counts the live processes on the waiting set at key.
local function live_waiting(key)
  local ids = redis.call('ZRANGE', key, 0, 99)
  local n = redis.call('ZCARD', key) - #ids
  if #ids == 0 then
    return n
  end
  local chans = {}
  for i, id in ipairs(ids) do
    chans[i] = KEYS[1] .. ':wake:' .. id
  end
  local subs = {}
  for _, cmd in ipairs({'NUMSUB', 'SHARDNUMSUB'}) do
    local r = redis.pcall('PUBSUB', cmd, unpack(chans))
    if type(r) == 'table' and not r.err then
      for i = 2, #r, 2 do
        if r[i] > 0 then
          subs[r[i - 1]] = true
        end
      end
    end
  end
  for _, c in ipairs(chans) do
    if subs[c] then
      n = n + 1
    end
  end
  return n
end

local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'string' then
  local t, owner, _, meta, _, d = record(redis.call('GET', KEYS[1]))
  if not t then
    return not_record()
  end
  local left, pttl = delaying(KEYS[1], d)
  -- A fair lock's record with waiters queued is told by its queue.
  local waiting, plain = 0, 1
  if redis.call('TYPE', KEYS[3])['ok'] == 'list' then
    waiting, plain = redis.call('LLEN', KEYS[3]), 0
  elseif redis.call('TYPE', KEYS[4])['ok'] == 'zset' then
    waiting = live_waiting(KEYS[4])
  end
  local last = string.format('%.0f', t)
  if left then
    return {false, false, false, -2, last, waiting, plain, left}
  end
  if not owner then
    return {false, false, false, -2, last, waiting, plain, 0}
  end
  if pttl then
    return {owner, last, meta, pttl - d, last, waiting, plain, 0}
  end
  return {owner, last, meta, redis.call('PTTL', KEYS[1]), last, waiting, plain, 0}
end
local v = {false, false, false}
if kind == 'hash' then
  v = redis.call('HMGET', KEYS[1], 'o', 't', 'm')
end
if kind ~= 'none' and not v[1] then
  return redis.error_reply('DLOCKCONFLICT key holds data that is not a dlock lock')
end
local queued = 0
if redis.call('TYPE', KEYS[3])['ok'] == 'list' then
  queued = redis.call('LLEN', KEYS[3])
end
return {v[1], v[2], v[3], redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]), queued, 0, 0}
