-- Release a plain dlock mutex if ARGV[1] holds it; touch nothing otherwise.
-- The lock record stays, released (its token only), until the holding's TTL
-- runs out, so that the next acquisition draws its token from it. When the
-- holding is marked as waited for, wake the process that has waited longest
-- (see wake.lua).
-- KEYS[1] lock record   KEYS[2] waiting processes (see acquire.lua)   ARGV[1] owner
-- ARGV[2] publish command ('PUBLISH', 'SPUBLISH', or '' for none); the wake
--         channel is the lock record's key followed by ':wake'
-- ARGV[3] the holding's token in base 36, which the released record keeps ('' when
--         not known: the record keeps its own). Redlock gives the token it handed
--         out, which may be below the one this server drew: any later majority
--         shares a server with the releasing one, whose record is then at or above
--         every token handed out so far.
-- ARGV[4] '1' when the release is forced (ForceUnlock): a holding with a
--         lock-delay leaves the key in its delay ("-T~" for the delay's ms).
-- A holding whose key is in its lock-delay (see lib.lua) is not held: the
-- release touches nothing.
-- The usual release makes one call: SET ... KEEPTTL GET, which writes the
-- released record and returns the holding's. A server out of memory refuses
-- that SET but allows DEL: the release then reads the record and deletes it
-- (the next token, drawn from the clock, is still above its token).
-- Returns 1 when released, 0 when not held by owner, or the error of the wake-up
-- (a table with field err) when released but the wake could not be published.
local want = ARGV[3]
if want == '' then
  want = '0'
end
local old = redis.pcall('SET', KEYS[1], '-' .. want, 'KEEPTTL', 'GET')
local full = false
if type(old) == 'table' and old.err then
  if string.sub(old.err, 1, 9) == 'WRONGTYPE' then
    -- A lock hash (a lock of another kind, forced as a plain one).
    local f = redis.call('HMGET', KEYS[1], 'o', 'w')
    if f[1] ~= ARGV[1] then
      local e = not_owned(f[1])
      if e then
        return e
      end
      return 0
    end
    redis.call('DEL', KEYS[1])
    if f[2] then
      local r = wake_next(KEYS[2], ARGV[2], KEYS[1] .. ':wake')
      if type(r) == 'table' and r.err then
        return {r.err}
      end
    end
    return 1
  end
  if string.sub(old.err, 1, 3) ~= 'OOM' then
    return old
  end
  full = true
  old = redis.call('GET', KEYS[1])
end
if not old then
  if not full then
    -- Nothing was there: SET made a key without expiry.
    redis.call('DEL', KEYS[1])
  end
  return 0
end
local t, owner, waited, _, t36, delay = record(old)
if t and owner and delaying(KEYS[1], delay) then
  owner = false -- run out: the key is in its lock-delay
end
if not t or owner ~= ARGV[1] then
  if not full then
    redis.call('SET', KEYS[1], old, 'KEEPTTL')
  end
  if not t then
    return not_record()
  end
  return 0
end
if full then
  redis.call('DEL', KEYS[1])
elseif ARGV[4] == '1' and delay and delay > 0 then
  redis.call('SET', KEYS[1], '-' .. t36 .. '~', 'PX', delay)
elseif want == '0' then
  redis.call('SET', KEYS[1], '-' .. t36, 'KEEPTTL')
end
if waited then
  local r = wake_next(KEYS[2], ARGV[2], KEYS[1] .. ':wake')
  if type(r) == 'table' and r.err then
    return {r.err}
  end
end
return 1
