-- Shared head of the legacy-protocol scripts (prepended to each of them).
-- The lock is the fleet's own string key holding an expiry timestamp, as the
-- SETNX/GETSET recipes write it; dlock keeps its own bookkeeping beside it.
-- KEYS[1] legacy lock key: a decimal timestamp in the fleet's unit
-- KEYS[2] companion hash in the same slot: o owner, v the stamp the owner wrote,
--         t last fencing token, m metadata
-- ARGV[1] unit in ms (1 or 1000)
-- ARGV[2] now in ms from the caller's clock, or '' to use the server clock
-- ARGV[3] lowest and ARGV[4] highest stamp taken as a timestamp in this unit;
--         anything else (another unit, not a number) is foreign data
-- ARGV[5] owner
-- A lock is held until the current time in the unit has passed its stamp
-- (stamp >= floor(now / unit)), the strictest reading among the recipes.

local unit = tonumber(ARGV[1])
local lo, hi = tonumber(ARGV[3]), tonumber(ARGV[4])

local function now_ms()
  if ARGV[2] ~= '' then
    return tonumber(ARGV[2])
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function conflict(v)
  return redis.error_reply('DLOCKCONFLICT legacy key holds ' .. string.format('%q', string.sub(v, 1, 40)) .. ', not a timestamp in this unit')
end

-- stamp parses a value of the legacy key: digits only, at most 15 of them (exact
-- in a Lua number), within [lo, hi]. It returns nil for anything else.
local function stamp(v)
  if #v > 15 or not string.match(v, '^%d+$') then
    return nil
  end
  local n = tonumber(v)
  if n < lo or n > hi then
    return nil
  end
  return n
end

-- live reports whether stamp s still holds the lock at now (ms).
local function live(s, now)
  return s >= math.floor(now / unit)
end

local function fmt(n)
  return string.format('%.0f', n)
end

-- remaining returns the ms left on live stamp s: until the expiry its writer
-- meant (the stamp less the one unit the recipes add) while that lies ahead,
-- else until the stamp has passed.
local function remaining(s, now)
  local r = (s - 1) * unit - now
  if r <= 0 then
    r = (s + 1) * unit - now
  end
  return r
end

-- left returns the ms left on live stamp s of KEYS[1]: remaining(s, now), or the
-- key's real expiry if that comes first. A seconds recipe that EXPIREs its key
-- (the PHP script) writes a takeover stamp seconds beyond that expiry, and a
-- waiter that slept to the stamp would find the key long gone and taken.
local function left(s, now)
  local r = remaining(s, now)
  local p = redis.call('PTTL', KEYS[1])
  if p >= 0 and p < r then
    r = p
  end
  return r
end

-- owned returns the current stamp when the legacy key holds the stamp ARGV[5]
-- wrote and it has not run out, false when it does not, or an error reply when
-- the key holds foreign data.
local function owned(now)
  local cur = redis.call('GET', KEYS[1])
  local s = nil
  if cur then
    s = stamp(cur)
    if not s then
      return nil, conflict(cur)
    end
  end
  local o = redis.call('HGET', KEYS[2], 'o')
  if not cur or o ~= ARGV[5] or redis.call('HGET', KEYS[2], 'v') ~= cur then
    return false
  end
  if not live(s, now) then
    return false
  end
  return s
end

-- write stores stamp s in the legacy key. When expire is '1' the key also gets a
-- real expiry as a safety net, once the stamp has passed.
local function write(s, now, expire)
  if expire == '1' then
    redis.call('SET', KEYS[1], fmt(s), 'PX', fmt((s + 1) * unit - now))
  else
    redis.call('SET', KEYS[1], fmt(s))
  end
end
