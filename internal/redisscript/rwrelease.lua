-- Release ARGV[1]'s holding of a dlock read-write lock, touching nothing that is
-- not its own (token.lua, fairlib.lua and leases.lua are prepended; fields as in
-- rwacquire.lua). A writer's release wakes every waiting reader (payload '*') and
-- a waiting writer; the last reader's release wakes a waiting writer.
-- ARGV[1] owner   ARGV[2] publish command ('' = none)   ARGV[3] readers' wake
-- channel   ARGV[4] writers' wake channel
-- ARGV[5] '' for a release; for an abandoned acquisition, the lifetime (ms) of
-- the owner's abandon mark KEYS[5] (see rwacquire.lua)
-- ARGV[6] 'w' when ARGV[1] is a writer's acquisition: abandoning it lifts the
--         waiting writers' mark (the others set it again on their next attempt)
-- Returns 1 when released, 0 when ARGV[1] held nothing.
if ARGV[5] ~= '' then
  redis.call('SET', KEYS[5], '1', 'PX', ARGV[5])
end
local e = kind_error('rw')
if e then
  return e
end
local now = now_ms()
drop_dead(now)
local f = redis.call('HMGET', KEYS[1], 'wo', 'ww', 'rq')
local mark = tonumber(f[2])
if mark and mark <= now then
  mark = nil
end
local held = unhold(ARGV[1])
local readers, writer = false, false
if f[1] == ARGV[1] then
  redis.call('HDEL', KEYS[1], 'wo')
  readers, writer = true, mark ~= nil
  mark = nil
elseif ARGV[5] ~= '' and ARGV[6] == 'w' and mark then
  readers, mark = true, nil
elseif held and mark and redis.call('ZCARD', KEYS[6]) == 0 then
  writer = true
end
if not mark then
  redis.call('HDEL', KEYS[1], 'ww')
end
if readers and f[3] then
  redis.call('HDEL', KEYS[1], 'rq')
  if ARGV[2] ~= '' then
    redis.pcall(ARGV[2], ARGV[3], '*')
  end
end
if writer and ARGV[2] ~= '' then
  redis.pcall(ARGV[2], ARGV[4], '')
end
settle(now, mark)
if held then
  return 1
end
return 0
