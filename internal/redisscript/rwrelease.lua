-- Release ARGV[1]'s holding of a dlock read-write lock, touching nothing that is
-- not its own (token.lua, fairlib.lua and leases.lua are prepended; fields as in
-- rwacquire.lua). A writer's release hands a read lease to every reader that
-- waits, so that they go before the next writer, and wakes every waiter (payload
-- '*'); the last reader's release wakes the next writer alone (by name).
-- ARGV[1] owner   ARGV[2] publish command ('' = none)   ARGV[3] wake channel
-- ARGV[4] '' for a release; for an abandoned acquisition, the lifetime (ms) of
-- the owner's abandon mark KEYS[5] (see rwacquire.lua; '0' = no mark): a waiting reader's
-- entry and a waiting writer's mark go with it
-- ARGV[5] fence retention ms   ARGV[6] the time (ms) a reader has to claim a
-- read lease handed to it
-- Returns 1 when released, 0 when ARGV[1] held nothing.
if ARGV[4] ~= '' then
  if ARGV[4] ~= '0' then
    redis.call('SET', KEYS[5], '1', 'PX', ARGV[4])
  end
end
local e = kind_error('rw')
if e then
  return e
end
local now = now_ms()
drop_dead(now)
local f = redis.call('HMGET', KEYS[1], 'wo', 'ww', 'wm')
local mark, marker = tonumber(f[2]), f[3]
if mark and mark <= now then
  mark, marker = nil, nil
end
local held = unhold(ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
local wake
if f[1] == ARGV[1] then
  -- The writer leaves: the readers that wait go in, then the next writer.
  redis.call('HDEL', KEYS[1], 'wo')
  if admit_readers(now, ARGV[6], ARGV[5], ARGV[2], ARGV[3]) == 0 and marker then
    wake = marker
  end
elseif ARGV[4] ~= '' and marker == ARGV[1] then
  -- The next writer gives up: the readers it barred go in.
  redis.call('HDEL', KEYS[1], 'ww', 'wm')
  mark = nil
  if not f[1] then
    admit_readers(now, ARGV[6], ARGV[5], ARGV[2], ARGV[3])
  end
elseif held and marker and redis.call('ZCARD', KEYS[6]) == 0 then
  wake = marker
end
if wake and ARGV[2] ~= '' then
  redis.pcall(ARGV[2], ARGV[3], wake)
end
settle(now, mark)
if held then
  return 1
end
return 0
