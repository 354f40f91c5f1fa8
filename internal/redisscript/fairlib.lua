-- Shared head of the fair-lock scripts (prepended to each of them, after token.lua).
-- KEYS[1] lock hash (fields o owner, t fencing token, m metadata)
-- KEYS[2] fence counter   KEYS[3] queue: list of waiting owners in arrival order
-- KEYS[4] queue deadlines: sorted set owner -> server time (ms) after which the
--         entry is dropped unless its waiter refreshed it
-- KEYS[5] the owner's abandon mark
-- All keys carry the lock's hash tag.

-- now_ms returns the server time in milliseconds.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Drop the entries of waiters that died or gave up without a word.
local function prune(now)
  local dead = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)
  for _, o in ipairs(dead) do
    redis.call('LREM', KEYS[3], 1, o)
  end
  if #dead > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
  end
end

local function dequeue(o)
  if redis.call('ZREM', KEYS[4], o) == 1 then
    redis.call('LREM', KEYS[3], 1, o)
  end
end

-- Make o the holder for ttl ms with a fresh fencing token (see token.lua).
local function grant(o, ttl, meta, retention)
  local token, t = next_token(KEYS[2], retention)
  if meta ~= '' then
    redis.call('HSET', KEYS[1], 'o', o, 't', t, 'm', meta)
  else
    redis.call('HSET', KEYS[1], 'o', o, 't', t)
  end
  redis.call('PEXPIRE', KEYS[1], ttl)
  return token
end

-- Hand a free lock to the head of the queue for claim ms (the head claims it
-- with its own TTL on its next attempt) and wake it. Returns the head or nil.
local function handoff(retention, claim, pub, channel)
  local head = redis.call('LINDEX', KEYS[3], 0)
  if not head then
    return nil
  end
  grant(head, claim, '', retention)
  if pub ~= '' then
    redis.pcall(pub, channel, head) -- a failed wake must not fail the hand-over
  end
  return head
end
