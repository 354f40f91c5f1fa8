-- A reentrant dlock mutex (token.lua is prepended): one holder ID may hold the
-- lock several times at once; each hold is one acquisition of that holder.
-- KEYS[1] lock hash   KEYS[2] fence counter   KEYS[3] the acquisition's abandon
--         mark (all in one hash slot)
-- ARGV[1] operation: acquire, extend, ttl, release, abandon
-- ARGV[2] holder ID   ARGV[3] acquisition ID ('' with release: every hold)
-- Hash fields: o holder ID, t fencing token, m metadata, w waiters may wait,
-- c hold count, and "h:" .. acquisition ID for each hold, so that a retried
-- attempt of an acquisition is recognised and never counted twice.
local op, holder, hold = ARGV[1], ARGV[2], 'h:' .. ARGV[3]

local function conflict()
  return redis.error_reply('DLOCKCONFLICT key holds a hash that is not a dlock lock')
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
  -- ARGV[7] '1' to mark a busy lock as waited for   ARGV[8] '1' to mark a new one
  -- Returns {1, token, holds} when taken or re-entered, {0, pttl} when another
  -- holder has it, {2, 0} when the acquisition was abandoned.
  if redis.call('EXISTS', KEYS[3]) == 1 then
    return {2, 0}
  end
  local f = redis.call('HMGET', KEYS[1], 'o', 't', 'c')
  if not f[1] then
    if redis.call('EXISTS', KEYS[1]) == 1 then
      return conflict()
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
    if redis.call('HSETNX', KEYS[1], hold, 1) == 1 then
      n = redis.call('HINCRBY', KEYS[1], 'c', 1)
    end
    keep_alive(ARGV[4])
    return {1, tonumber(f[2]), n}
  end
  if ARGV[7] == '1' then
    redis.call('HSET', KEYS[1], 'w', '1')
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
  return release(false)
end
return redis.error_reply('ERR dlock: unknown reentrant operation')
