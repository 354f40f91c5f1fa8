-- Release ARGV[1]'s holding of a dlock read-write lock, touching nothing that is
-- not its own (token.lua, fairlib.lua and leases.lua are prepended; keys and
-- fields as in rwacquire.lua). A writer's release hands a read lease to every
-- reader that waits, so that they go before the next writer, and wakes every
-- waiter (payload '*'); with no reader waiting, it wakes the next writer alone
-- (by name), as does the last reader's release.
-- ARGV[1] owner   ARGV[2] publish command ('' = none)   ARGV[3] wake channel
-- ARGV[4] '' for a release; for an abandoned acquisition, the lifetime (ms) of
-- the owner's abandon mark KEYS[5] (see rwacquire.lua; '0' = no mark): a waiting
-- reader's entry and a waiting writer's queue entry go with it
-- ARGV[5] fence retention ms   ARGV[6] the time (ms) a reader has to claim a
-- read lease handed to it
-- Returns 1 when released, 0 when ARGV[1] held nothing.
if ARGV[4] ~= '' and ARGV[4] ~= '0' then
  redis.call('SET', KEYS[5], '1', 'PX', ARGV[4])
end
local e = kind_error('rw')
if e then
  return e
end
local now = now_ms()
drop_dead(now)
local wo = redis.call('HGET', KEYS[1], 'wo')
local held = unhold(ARGV[1])
if ARGV[4] ~= '' then
  redis.call('ZREM', KEYS[7], ARGV[1])
  dequeue(ARGV[1])
end
local wake
if wo == ARGV[1] then
  -- The writer leaves: the readers that wait go in, then the next writer.
  redis.call('HDEL', KEYS[1], 'wo')
  if admit_readers(now, ARGV[6], ARGV[5], ARGV[2], ARGV[3]) == 0 then
    wake = head_writer(now)
  end
elseif not wo or not redis.call('ZSCORE', KEYS[6], wo) then
  local head = head_writer(now)
  if head then
    if redis.call('ZCARD', KEYS[6]) == 0 then
      wake = head -- the last reader left
    end
  elseif ARGV[4] ~= '' then
    -- The next writer gave up: the readers it barred go in.
    admit_readers(now, ARGV[6], ARGV[5], ARGV[2], ARGV[3])
  end
end
if wake and ARGV[2] ~= '' then
  redis.pcall(ARGV[2], ARGV[3], wake)
end
settle(now)
if held then
  return 1
end
return 0
