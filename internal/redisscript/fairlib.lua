-- Shared head of the fair-lock scripts (prepended to each of them, after token.lua).
-- KEYS[1] lock hash (fields o owner, t fencing token, m metadata)
-- KEYS[2] fence counter   KEYS[3] queue: list of waiting owners in arrival order
-- KEYS[4] queue deadlines: sorted set owner -> server time (ms) after which the
--         entry is dead unless its waiter refreshed it
-- KEYS[5] the caller's abandon mark
-- All keys carry the lock's hash tag. A waiter handed the lock leaves the queue
-- at the hand-over, so a holder is never in it.

-- ms turns a TIME reply into milliseconds.
local function ms(tm)
  return tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
end

-- Make o the holder for ttl ms with a fresh fencing token (see token.lua); tm is
-- a TIME reply already read, or nil.
local function grant(o, ttl, meta, retention, tm)
  local token, t = next_token(KEYS[2], retention, tm)
  if meta ~= '' then
    redis.call('HSET', KEYS[1], 'o', o, 't', t, 'm', meta)
  else
    redis.call('HSET', KEYS[1], 'o', o, 't', t)
  end
  redis.call('PEXPIRE', KEYS[1], ttl)
  return token
end

-- pop_live takes the first live waiter off the queue, dropping dead ones on the
-- way, and returns it with the TIME reply read (or nil when none is left).
local function pop_live()
  local head = redis.call('LPOP', KEYS[3])
  if not head then
    return nil
  end
  local tm = redis.call('TIME')
  local now = ms(tm)
  for _ = 1, 1000 do
    local dl = redis.call('ZSCORE', KEYS[4], head)
    redis.call('ZREM', KEYS[4], head)
    if dl and tonumber(dl) > now then
      return head, tm
    end
    head = redis.call('LPOP', KEYS[3])
    if not head then
      return nil
    end
  end
  return nil
end

-- give hands the lock to head for claim ms (it claims it with its own TTL on its
-- next attempt) and wakes it.
local function give(head, tm, retention, claim, pub, channel)
  grant(head, claim, '', retention, tm)
  if pub ~= '' then
    redis.pcall(pub, channel, head) -- a failed wake must not fail the hand-over
  end
end

-- handoff hands the free lock to the first live waiter, if any.
local function handoff(retention, claim, pub, channel)
  local head, tm = pop_live()
  if head then
    give(head, tm, retention, claim, pub, channel)
  end
  return head
end
