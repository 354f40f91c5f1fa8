-- Take a dlock read-write lock for reading or writing (token.lua, fairlib.lua and
-- leases.lua are prepended). Lock hash fields besides the holders': rw = '1' (the
-- kind), wo = the writer. Writers that wait queue in arrival order in KEYS[3],
-- with their entries' deadlines in KEYS[4] (as the fair lock's waiters): the
-- first live one is the next writer, which bars new readers, and takes the lock
-- once no lease is left; the others wait their turn behind it. Readers that wait
-- are in KEYS[7] (owner -> server time, ms, until which the entry lives unless
-- refreshed): a writer's release hands each a read lease and wakes them.
-- ARGV[1] owner   ARGV[2] ttl ms   ARGV[3] fence retention ms   ARGV[4] metadata
-- ARGV[5] '1' when the caller waits if the lock is busy   ARGV[6] 'w' or 'r'
-- ARGV[7] lifetime ms of a waiting writer's queue entry
-- ARGV[8] publish command ('' = none)   ARGV[9] the wake channel
-- ARGV[10] for a downgrade, the writer whose holding becomes ARGV[1]'s read
--          holding, else ''
-- ARGV[11] lifetime ms of a waiting reader's entry, also the time a reader has
--          to claim a read lease handed to it
-- Returns {1, token} when taken (also when the owner holds it already: a retry;
-- its TTL is reset), {0, ms until the caller may try again} when busy, {2, 0}
-- when the owner's acquisition was abandoned, {3, 0} when a downgrade finds
-- ARGV[10] holding nothing, {4, 0} when a downgrade finds ARGV[10] reading or
-- the key a lock of another kind (ARGV[10]'s lease is not a write lease).
if abandoned(KEYS[5]) then
  return {2, 0}
end
if ARGV[10] ~= '' and redis.call('EXISTS', KEYS[1]) == 1 and not redis.call('HGET', KEYS[1], 'rw') then
  return {4, 0}
end
local e = kind_error('rw')
if e then
  return e
end
local o, now = ARGV[1], now_ms()
drop_dead(now)
local wo = redis.call('HGET', KEYS[1], 'wo')
if wo and not redis.call('ZSCORE', KEYS[6], wo) then
  redis.call('HDEL', KEYS[1], 'wo') -- the writer's lease ended
  wo = nil
end
if redis.call('ZSCORE', KEYS[6], o) then
  redis.call('ZADD', KEYS[6], now + tonumber(ARGV[2]), o)
  if ARGV[4] ~= '' then
    redis.call('HSET', KEYS[1], 'm:' .. o, ARGV[4])
  end
  settle(now)
  return {1, tonumber(redis.call('HGET', KEYS[1], 't:' .. o))}
end
if ARGV[10] ~= '' then
  if wo ~= ARGV[10] then
    if redis.call('ZSCORE', KEYS[6], ARGV[10]) then
      return {4, 0}
    end
    return {3, 0}
  end
  unhold(wo)
  redis.call('HDEL', KEYS[1], 'wo')
  local token = hold(o, now, ARGV[2], ARGV[4], ARGV[3])
  admit_readers(now, ARGV[11], ARGV[3], ARGV[8], ARGV[9])
  settle(now)
  return {1, token}
end
local head, until_ = head_writer(now)
if ARGV[6] == 'w' then
  if (not head or head == o) and redis.call('ZCARD', KEYS[6]) == 0 then
    if head then
      redis.call('LPOP', KEYS[3])
      redis.call('ZREM', KEYS[4], o)
    end
    redis.call('HSET', KEYS[1], 'rw', '1', 'wo', o)
    local token = hold(o, now, ARGV[2], ARGV[4], ARGV[3])
    settle(now)
    return {1, token}
  end
  if ARGV[5] == '1' then
    enqueue(o, now, ARGV[7])
    if not head then
      until_ = now + tonumber(ARGV[7])
    end
  end
  local busy = last_end() or until_ or now
  if wo then
    busy = tonumber(redis.call('ZSCORE', KEYS[6], wo))
  end
  settle(now)
  return {0, busy - now}
end
if not wo and not head then
  redis.call('ZREM', KEYS[7], o)
  redis.call('HSET', KEYS[1], 'rw', '1')
  local token = hold(o, now, ARGV[2], ARGV[4], ARGV[3])
  settle(now)
  return {1, token}
end
if ARGV[5] == '1' then
  redis.call('ZADD', KEYS[7], now + tonumber(ARGV[11]), o)
  redis.call('PEXPIRE', KEYS[7], ARGV[11])
end
local busy = until_
if wo then
  busy = tonumber(redis.call('ZSCORE', KEYS[6], wo))
end
settle(now)
return {0, busy - now}
