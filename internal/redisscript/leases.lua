-- Shared head of the scripts of locks with several holders (semaphore permits;
-- readers and a writer), prepended after token.lua and fairlib.lua (whose ms and
-- pop_live serve the semaphore's queue).
-- KEYS[1] lock hash: the kind's own fields, and per holder o the fields
--         't:'..o (fencing token) and 'm:'..o (metadata)
-- KEYS[2] fence counter   KEYS[3], KEYS[4] queue and queue deadlines (fairlib.lua)
-- KEYS[5] the owner's abandon mark
-- KEYS[6] holders: sorted set owner -> server time (ms) at which its lease ends
-- KEYS[7] (read-write lock) waiting readers: sorted set owner -> server time
--         (ms) until which the entry lives; (semaphore) its stored size
--         (semlib.lua)
-- All keys carry the lock's hash tag.

-- now_ms returns the server time in milliseconds.
local function now_ms()
  return ms(redis.call('TIME'))
end

-- Take o out of the queue, if it is there.
local function dequeue(o)
  if redis.call('ZREM', KEYS[4], o) == 1 then
    redis.call('LREM', KEYS[3], 1, o)
  end
end

-- Put o at the end of the queue, or refresh its entry, for life ms.
local function enqueue(o, now, life)
  if redis.call('ZADD', KEYS[4], now + tonumber(life), o) == 1 then
    redis.call('RPUSH', KEYS[3], o)
  end
  redis.call('PEXPIRE', KEYS[3], life)
  redis.call('PEXPIRE', KEYS[4], life)
end

-- kind_error returns an error reply unless KEYS[1] is free or a lock whose hash
-- has field (the kind's marker), or nil.
local function kind_error(field)
  if redis.call('EXISTS', KEYS[1]) == 1 and not redis.call('HGET', KEYS[1], field) then
    return conflict('lock of this kind')
  end
  return nil
end

-- Drop the holders whose leases ended (crashed or cut-off holders); returns them.
local function drop_dead(now)
  local dead = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now)
  for _, o in ipairs(dead) do
    redis.call('HDEL', KEYS[1], 't:' .. o, 'm:' .. o)
  end
  if #dead > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', now)
  end
  return dead
end

-- Make o a holder until now + ttl with a fresh fencing token (see token.lua).
local function hold(o, now, ttl, meta, retention)
  local token, t = next_token(KEYS[2], retention)
  redis.call('ZADD', KEYS[6], now + tonumber(ttl), o)
  if meta ~= '' then
    redis.call('HSET', KEYS[1], 't:' .. o, t, 'm:' .. o, meta)
  else
    redis.call('HSET', KEYS[1], 't:' .. o, t)
  end
  return token
end

-- The end (ms) of o's lease, or nil when o holds none.
local function lease_end(o, now)
  local s = tonumber(redis.call('ZSCORE', KEYS[6], o))
  if s and s > now then
    return s
  end
  return nil
end

-- Remove holder o; returns whether it held.
local function unhold(o)
  redis.call('HDEL', KEYS[1], 't:' .. o, 'm:' .. o)
  return redis.call('ZREM', KEYS[6], o) == 1
end

-- The end (ms) of the earliest and of the latest lease, or nil without holders.
local function first_end()
  local r = redis.call('ZRANGE', KEYS[6], 0, 0, 'WITHSCORES')
  return tonumber(r[2])
end
local function last_end()
  local r = redis.call('ZRANGE', KEYS[6], -1, -1, 'WITHSCORES')
  return tonumber(r[2])
end

-- Let the lock's keys live as long as its last lease (or until keep, a server
-- time in ms, when later), and delete them when nothing is left.
local function settle(now, keep)
  local e = last_end() or 0
  if keep and keep > e then
    e = keep
  end
  if e <= now then
    redis.call('DEL', KEYS[1], KEYS[6])
    return
  end
  redis.call('PEXPIREAT', KEYS[1], e)
  if redis.call('EXISTS', KEYS[6]) == 1 then
    redis.call('PEXPIREAT', KEYS[6], e)
  end
end

-- Hand up to free permits to the first live waiters of the queue, for claim ms
-- each, and wake each by name; stop early at o (when given), which is taken off
-- the queue. Returns the permits left and whether o was reached.
local function hand_out(free, o, now, claim, retention, pub, channel)
  while free > 0 do
    local head = pop_live()
    if not head then
      break
    end
    free = free - 1
    if head == o then
      return free, true
    end
    hold(head, now, claim, '', retention)
    if pub ~= '' then
      redis.pcall(pub, channel, head) -- a failed wake must not fail the hand-over
    end
  end
  return free, false
end

-- head_writer returns the first live writer queued for a read-write lock and
-- the end (ms) of its queue entry, dropping dead entries off the front of the
-- queue; nil when no writer waits.
local function head_writer(now)
  for _ = 1, 1000 do
    local head = redis.call('LINDEX', KEYS[3], 0)
    if not head then
      return nil
    end
    local dl = tonumber(redis.call('ZSCORE', KEYS[4], head))
    if dl and dl > now then
      return head, dl
    end
    redis.call('LPOP', KEYS[3])
    redis.call('ZREM', KEYS[4], head)
  end
  return nil
end

-- admit_readers hands a read lease (for claim ms) to every reader waiting in
-- KEYS[7] of a read-write lock, and wakes them all; returns how many.
local function admit_readers(now, claim, retention, pub, channel)
  local rs = redis.call('ZRANGEBYSCORE', KEYS[7], '(' .. now, '+inf')
  redis.call('DEL', KEYS[7])
  for _, r in ipairs(rs) do
    hold(r, now, claim, '', retention)
  end
  if #rs > 0 then
    redis.call('HSET', KEYS[1], 'rw', '1')
    if pub ~= '' then
      redis.pcall(pub, channel, '*')
    end
  end
  return #rs
end
