-- Shared head of the fair mutex's scripts (prepended to each of them, after
-- lib.lua). The fair mutex keeps its holding in a lock record, as the plain
-- mutex does (see lib.lua): "FT OWNER[ METADATA]" while held, "FT" once
-- released, until the holding's TTL runs out. F is '+' for a holding that
-- waiters may queue behind (its release looks at the queue) and for a released
-- record whose queue may still hold waiters, '-' otherwise.
-- KEYS[1] lock record   KEYS[2] fence counter of the other lock kinds (read only)
-- KEYS[3] queue: list of waiting entries in arrival order
-- KEYS[4] the caller's queue entry key (see alive_key)   KEYS[5] its abandon mark
-- All keys carry the lock's hash tag. A waiter handed the lock leaves the queue
-- at the hand-over, so a holder is never in it. A queue entry is the waiter's
-- Client id (16 characters) followed by its owner, so that a hand-over wakes
-- that Client alone, on its own channel; the entry lives while its key
-- (alive_key) does.

-- draw returns the next fencing token: the server time in microseconds, or one
-- above the newest token the key remembers (last, the record's, and the fence
-- counter's value fence, a string or nil) when that is not below the clock. It
-- returns nil when the fence counter holds foreign data. The clock is read even
-- when a record is there: state restored from an older save or promoted from a
-- lagging replica may remember a token below one already handed out, which only
-- the clock then exceeds.
local function draw(last, fence)
  local now = redis.call('TIME')
  local token = tonumber(now[1]) * 1000000 + tonumber(now[2])
  if last and last >= token then
    token = last + 1
  end
  if fence then
    local f = counter(fence)
    if not f then
      return nil
    end
    if f >= token then
      token = f + 1
    end
  end
  return token
end

-- alive_key returns the key of queue entry e: the queue's key, ':' and e, set
-- for the entry's lifetime by each attempt of its waiter.
local function alive_key(e)
  return KEYS[3] .. ':' .. e
end

-- pop_waiting takes the first live waiter off the queue, dropping the dead
-- entries (whose keys expired) on the way, and returns its entry, or nil when
-- none is left; the second result is true when entries may be left (the walk
-- stopped early).
local function pop_waiting()
  for _ = 1, 1000 do
    local head = redis.call('LPOP', KEYS[3])
    if not head then
      return nil, false
    end
    if redis.call('DEL', alive_key(head)) == 1 then
      return head, true
    end
  end
  return nil, true
end

-- give hands the lock with token t (a number) to the waiter of queue entry
-- head for claim ms (it claims it with its own TTL and metadata on its next
-- attempt) and wakes it: a message on its Client's channel (channel, ':' and
-- the Client id) naming its owner.
local function give(head, t, claim, pub, channel)
  local owner = string.sub(head, 17)
  redis.call('SET', KEYS[1], held_record(b36(t), owner, false, true), 'PX', claim)
  if pub ~= '' then
    -- a failed wake must not fail the hand-over
    redis.pcall(pub, channel .. ':' .. string.sub(head, 1, 16), owner)
  end
end
