-- Take a fair (FIFO) dlock mutex: granted only to the head of its queue.
-- ARGV[1] owner   ARGV[2] ttl ms   ARGV[3] fence retention ms   ARGV[4] metadata
-- ARGV[5] '1' to join the queue (or refresh the entry) when not taken
-- ARGV[6] queue entry lifetime ms, also the time a head has to claim a hand-over
-- ARGV[7] publish command ('PUBLISH', 'SPUBLISH' or '')   ARGV[8] wake channel
-- ARGV[9] the caller's queue entry: its Client id (16 characters) and ARGV[1];
--         KEYS[4] is its key (see fairlib.lua)
-- ARGV[10] '1' for a later attempt of a waiting acquisition, which most likely
--          claims a lock handed over to it: the lock is read first
-- A lock handed over to this owner by a release (o = owner) is claimed: its TTL is
-- set to ARGV[2].
-- Returns {1, token} when taken, {0, pttl} otherwise, {2, 0} when the owner's
-- acquisition was abandoned.
-- Free with nobody queued: five calls. A claim after a hand-over: two. Joining
-- the queue behind a holder: five.

-- claim takes the lock read as f (fields o, t) that ARGV[1] holds.
local function claim(f)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if ARGV[4] ~= '' then
    redis.call('HSET', KEYS[1], 'm', ARGV[4])
  end
  return {1, tonumber(f[2])}
end

local f
if ARGV[10] == '1' then
  f = redis.call('HMGET', KEYS[1], 'o', 't', 'q')
  if f[1] == ARGV[1] then
    return claim(f)
  end
end
-- The mark is counted twice: n tells which of the three keys exist.
local n = redis.call('EXISTS', KEYS[1], KEYS[3], KEYS[5], KEYS[5])
if n == 0 then
  return {1, grant(ARGV[1], ARGV[2], ARGV[4], ARGV[3], nil, false)}
end
f = f or redis.call('HMGET', KEYS[1], 'o', 't', 'q')
if f[1] == ARGV[1] then
  return claim(f)
end
if not f[1] then
  local e = not_owned(f[1])
  if e then
    return e
  end
else
  n = n - 1
end
if n >= 2 then
  return {2, 0}
end
if not f[1] then
  -- Free, with waiters queued: the lock is the first live one's.
  local head = pop_waiting()
  if not head or head == ARGV[9] then
    return {1, grant(ARGV[1], ARGV[2], ARGV[4], ARGV[3], nil, head ~= nil)}
  end
  give(head, ARGV[3], ARGV[6], ARGV[7], ARGV[8])
  f[3] = '1'
end
if ARGV[5] == '1' then
  if not redis.call('SET', KEYS[4], '1', 'PX', ARGV[6], 'GET') then
    redis.call('RPUSH', KEYS[3], ARGV[9]) -- a new entry, else a refreshed one
  end
  redis.call('PEXPIRE', KEYS[3], ARGV[6])
  if not f[3] then
    redis.call('HSET', KEYS[1], 'q', '1') -- the release looks at the queue
  end
  -- A queued waiter is woken by the hand-over and comes back to refresh its
  -- entry: the holder's TTL would not change when it tries next.
  return {0, -1}
end
return {0, redis.call('PTTL', KEYS[1])}
