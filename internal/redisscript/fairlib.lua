-- Shared head of the fair-lock scripts (prepended to each of them, after token.lua).
-- KEYS[1] lock hash (fields o owner, t fencing token, m metadata)
-- KEYS[2] fence counter   KEYS[3] queue: list of waiting owners in arrival order
-- KEYS[4] queue deadlines: sorted set owner -> server time (ms) after which the
--         entry is dead unless its waiter refreshed it (the semaphore's, the
--         read-write lock's writers'); for the fair mutex, the caller's entry
--         key (see alive_key)
-- KEYS[5] the caller's abandon mark
-- All keys carry the lock's hash tag. A waiter handed the lock leaves the queue
-- at the hand-over, so a holder is never in it. A fair mutex's queue entry is the
-- waiter's Client id (16 characters) followed by its owner, so that a hand-over
-- wakes that Client alone, on its own channel; the entry lives while its key
-- (alive_key) does, and the lock hash of a holding that waiters may queue
-- behind has field q.

-- ms turns a TIME reply into milliseconds.
local function ms(tm)
  return tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
end

-- Make o the holder for ttl ms with a fresh fencing token (see token.lua); tm is
-- a TIME reply already read, or nil; q marks the holding as one that waiters
-- may queue behind (its release looks at the queue).
local function grant(o, ttl, meta, retention, tm, q)
  local token, t = next_token(KEYS[2], retention, tm)
  local fields = {'o', o, 't', t}
  if meta ~= '' then
    fields[#fields + 1] = 'm'
    fields[#fields + 1] = meta
  end
  if q then
    fields[#fields + 1] = 'q'
    fields[#fields + 1] = '1'
  end
  redis.call('HSET', KEYS[1], unpack(fields))
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

-- alive_key returns the key of fair-mutex queue entry e: the queue's key, ':'
-- and e, set for the entry's lifetime by each attempt of its waiter.
local function alive_key(e)
  return KEYS[3] .. ':' .. e
end

-- pop_waiting takes the first live waiter off a fair mutex's queue, dropping
-- the dead entries (whose keys expired) on the way, and returns its entry, or
-- nil when none is left.
local function pop_waiting()
  for _ = 1, 1000 do
    local head = redis.call('LPOP', KEYS[3])
    if not head then
      return nil
    end
    if redis.call('DEL', alive_key(head)) == 1 then
      return head
    end
  end
  return nil
end

-- give hands the lock to the waiter of queue entry head for claim ms (it claims
-- it with its own TTL on its next attempt) and wakes it: a message on its
-- Client's channel (channel, ':' and the Client id) naming its owner.
local function give(head, retention, claim, pub, channel)
  local owner = string.sub(head, 17)
  grant(owner, claim, '', retention, nil, true)
  if pub ~= '' then
    -- a failed wake must not fail the hand-over
    redis.pcall(pub, channel .. ':' .. string.sub(head, 1, 16), owner)
  end
end
