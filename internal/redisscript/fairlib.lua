-- Shared head of the queued lease scripts (the semaphore's, the read-write
-- lock's; prepended to each of them, after token.lua).
-- KEYS[1] lock hash   KEYS[2] fence counter
-- KEYS[3] queue: list of waiting owners in arrival order
-- KEYS[4] queue deadlines: sorted set owner -> server time (ms) after which the
--         entry is dead unless its waiter refreshed it
-- All keys carry the lock's hash tag. A waiter handed the lock leaves the queue
-- at the hand-over, so a holder is never in it.

-- ms turns a TIME reply into milliseconds.
local function ms(tm)
  return tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
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
