-- A reentrant dlock mutex (token.lua is prepended): one holder ID may hold the
-- lock several times at once; each hold is one acquisition of that holder.
-- KEYS[1] lock hash   KEYS[2] fence counter   KEYS[3] the acquisition's abandon
--         mark   KEYS[4] the waiting owners (all in one hash slot)
-- ARGV[1] operation: acquire, extend, ttl, release, abandon
-- ARGV[2] holder ID   ARGV[3] acquisition ID ('' with release: every hold)
-- Hash fields: o holder ID, t fencing token, m metadata, w waiters may wait,
-- c hold count, and "h:" .. acquisition ID for each hold, so that a retried
-- attempt of an acquisition is recognised and never counted twice.
local op, holder, hold = ARGV[1], ARGV[2], 'h:' .. ARGV[3]

-- The waiting owners: holder IDs other than the holder's that wait, in KEYS[4]
-- (fields 'a:' .. ID = arrival ms, 'e:' .. ID = server time ms until which the
-- entry lives unless its waiter refreshes it, and p = the time ms from which the
-- holder's new re-entries are barred, moved on with each hold it gives up).
-- The owner that has waited longest is the next owner: while it waits, the
-- holder's new re-entries that would wait (not single attempts) wait too (its
-- holds drain), and a free lock is its alone. A holder whose holds all stay put for the bar time (a re-entry nested
-- in a hold it cannot give up) may re-enter again.

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- next_owner drops the dead entries and returns the next owner (nil when none
-- waits) and p.
local function next_owner(now)
  local all = redis.call('HGETALL', KEYS[4])
  if #all == 0 then
    return nil, nil
  end
  local f = {}
  for i = 1, #all, 2 do
    f[all[i]] = all[i + 1]
  end
  local head, first
  for k, v in pairs(f) do
    if string.sub(k, 1, 2) == 'a:' then
      local id = string.sub(k, 3)
      local e = tonumber(f['e:' .. id] or '0')
      if e <= now then
        redis.call('HDEL', KEYS[4], k, 'e:' .. id)
      elseif not first or tonumber(v) < first or (tonumber(v) == first and id < head) then
        head, first = id, tonumber(v)
      end
    end
  end
  if not head then
    redis.call('DEL', KEYS[4])
    return nil, nil
  end
  return head, tonumber(f['p'] or '0')
end

-- wait_turn enters (or refreshes) the holder as a waiting owner for life ms.
local function wait_turn(now, life)
  if redis.call('HSETNX', KEYS[4], 'a:' .. holder, now) == 1 and redis.call('HEXISTS', KEYS[4], 'p') == 0 then
    redis.call('HSET', KEYS[4], 'p', now)
  end
  redis.call('HSET', KEYS[4], 'e:' .. holder, now + tonumber(life))
  if redis.call('PTTL', KEYS[4]) < tonumber(life) then
    redis.call('PEXPIRE', KEYS[4], life)
  end
end

-- leave_turn takes the holder off the waiting owners.
local function leave_turn()
  if redis.call('HDEL', KEYS[4], 'a:' .. holder, 'e:' .. holder) > 0 and redis.call('HLEN', KEYS[4]) <= 1 then
    redis.call('DEL', KEYS[4])
  end
end

-- keep_alive sets the expiry to ttl ms unless the lock already lives longer: the
-- holds of one holder share the key, and one must not cut another's time short.
local function keep_alive(ttl)
  if redis.call('PTTL', KEYS[1]) < tonumber(ttl) then
    redis.call('PEXPIRE', KEYS[1], ttl)
  end
end

-- release drops hold (every hold when all) and deletes the lock with the last
-- one, waking waiters (ARGV[4] publish command, '' = none; ARGV[5] channel).
-- Returns 1, 0 when not held, or the error of the wake-up in a table.
local function release(all)
  local f = redis.call('HMGET', KEYS[1], 'o', 'w')
  if f[1] ~= holder then
    if not f[1] and redis.call('EXISTS', KEYS[1]) == 1 then
      return conflict()
    end
    return 0
  end
  if not all then
    if redis.call('HDEL', KEYS[1], hold) == 0 then
      return 0
    end
    if redis.call('HINCRBY', KEYS[1], 'c', -1) > 0 then
      if redis.call('EXISTS', KEYS[4]) == 1 then
        redis.call('HSET', KEYS[4], 'p', now_ms()) -- the holds drain: keep the bar
      end
      return 1
    end
  end
  redis.call('DEL', KEYS[1])
  if f[2] and ARGV[4] ~= '' then
    local r = redis.pcall(ARGV[4], ARGV[5], '') -- a failed wake must not fail the release
    if type(r) == 'table' and r.err then
      return {r.err}
    end
  end
  return 1
end

if op == 'acquire' then
  -- ARGV[4] ttl ms   ARGV[5] fence retention ms   ARGV[6] metadata ('' = none)
  -- ARGV[7] '1' to mark a busy lock as waited for (and, for another holder ID,
  -- to wait as a waiting owner)   ARGV[8] '1' to mark a new one
  -- ARGV[9] life ms of a waiting owner's entry   ARGV[10] the bar time ms
  -- Returns {1, token, holds} when taken or re-entered, {0, ms until the caller
  -- may try again} when another holder has it, when the next owner's turn comes
  -- first or when a re-entry is barred, {2, 0} when the acquisition was
  -- abandoned.
  if abandoned(KEYS[3]) then
    return {2, 0}
  end
  local f = redis.call('HMGET', KEYS[1], 'o', 't', 'c')
  local now = now_ms()
  local head, p = next_owner(now)
  if head == holder then
    head = nil
  end
  if not f[1] then
    if redis.call('EXISTS', KEYS[1]) == 1 then
      return conflict()
    end
    if head then
      -- Free, and the next owner's turn.
      if ARGV[7] == '1' then
        wait_turn(now, ARGV[9])
      end
      return {0, math.max(tonumber(redis.call('HGET', KEYS[4], 'e:' .. head)) - now, 1)}
    end
    leave_turn()
    if redis.call('EXISTS', KEYS[4]) == 1 then
      redis.call('HSET', KEYS[4], 'p', now) -- others wait: re-entries are barred
    end
    local token, t = next_token(KEYS[2], ARGV[5]) -- see token.lua
    local fields = {'o', holder, 't', t, 'c', 1, hold, 1}
    if ARGV[6] ~= '' then
      fields[#fields + 1] = 'm'
      fields[#fields + 1] = ARGV[6]
    end
    if ARGV[8] == '1' then
      fields[#fields + 1] = 'w'
      fields[#fields + 1] = '1'
    end
    redis.call('HSET', KEYS[1], unpack(fields))
    redis.call('PEXPIRE', KEYS[1], ARGV[4])
    return {1, token, 1}
  end
  if f[1] == holder then
    local n = tonumber(f[3])
    if redis.call('HEXISTS', KEYS[1], hold) == 0 then
      local barred = ARGV[7] == '1' and head and p + tonumber(ARGV[10]) - now
      if barred and barred > 0 then
        -- A new re-entry that would wait, while another owner waits: after
        -- the next owner (a single attempt is never barred).
        redis.call('HSET', KEYS[1], 'w', '1')
        return {0, math.min(barred, redis.call('PTTL', KEYS[1]))}
      end
      redis.call('HSET', KEYS[1], hold, 1)
      n = redis.call('HINCRBY', KEYS[1], 'c', 1)
    end
    keep_alive(ARGV[4])
    return {1, tonumber(f[2]), n}
  end
  if ARGV[7] == '1' then
    redis.call('HSET', KEYS[1], 'w', '1')
    wait_turn(now, ARGV[9])
  end
  return {0, redis.call('PTTL', KEYS[1])}
elseif op == 'extend' or op == 'ttl' then
  -- extend: ARGV[4] ttl ms; returns 1, or 0 when the hold is gone.
  -- ttl: returns the PTTL in ms, or -2 when the hold is gone.
  local f = redis.call('HMGET', KEYS[1], 'o', hold)
  if f[1] ~= holder or not f[2] then
    if not f[1] and redis.call('EXISTS', KEYS[1]) == 1 then
      return conflict()
    end
    if op == 'ttl' then
      return -2
    end
    return 0
  end
  if op == 'ttl' then
    return redis.call('PTTL', KEYS[1])
  end
  keep_alive(ARGV[4])
  return 1
elseif op == 'release' then
  return release(ARGV[3] == '')
elseif op == 'abandon' then
  -- ARGV[6] mark lifetime ms: a late attempt of the acquisition finds the mark
  -- ('0': no attempt can still arrive, no mark).
  if ARGV[6] ~= '0' then
    redis.call('SET', KEYS[3], '1', 'PX', ARGV[6])
  end
  leave_turn()
  return release(false)
end
return redis.error_reply('ERR dlock: unknown reentrant operation')
