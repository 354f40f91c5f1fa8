-- Shared head of the scripts that free a plain dlock mutex (prepended to them).

-- wake_next wakes the process that has waited longest for the lock: it takes the
-- first Client id off the waiting set and publishes on that Client's own wake
-- channel (the lock's channel, ':' and the id), which only it subscribes to. The
-- Client goes back on the set if its attempt loses to a newcomer, with its old
-- arrival. An id whose channel nobody subscribes to is a process that died, or
-- left without taking its id off (it exited, its connection dropped): it is
-- dropped and the next one taken, so that the wake reaches a live process. (A
-- live one that is not subscribed, whose subscription is on its way or being
-- made again, is woken by its subscription's confirmation, and joins again with
-- its old arrival.) With nobody live on the set (it expired), the message goes
-- to the lock's channel. It returns the publish reply (an error table when the
-- server refused it: a failed wake must not fail the caller).
local function wake_next(waiting, pub, channel)
  if not pub or pub == '' then
    return nil
  end
  local numsub = 'NUMSUB'
  if pub == 'SPUBLISH' then
    numsub = 'SHARDNUMSUB'
  end
  for _ = 1, 1000 do
    local head = redis.call('ZPOPMIN', waiting)
    if not head[1] then
      break
    end
    local c = channel .. ':' .. head[1]
    local n = redis.pcall('PUBSUB', numsub, c)
    -- A server that cannot count gets the message sent anyway.
    if type(n) ~= 'table' or n.err or n[2] ~= 0 then
      return redis.pcall(pub, c, '')
    end
  end
  return redis.pcall(pub, channel, '')
end
