-- Shared head of the scripts that free a plain dlock mutex (prepended to them).

-- wake_next wakes the process that has waited longest for the lock: it takes the
-- first Client id off the waiting set and publishes on that Client's own wake
-- channel (the lock's channel, ':' and the id), which only it subscribes to. The
-- Client goes back on the set if its attempt loses to a newcomer, with its old
-- arrival. With nobody on the set (it expired), the message goes to the lock's
-- channel. It returns the publish reply (an error table when the server refused
-- it: a failed wake must not fail the caller).
local function wake_next(waiting, pub, channel)
  if not pub or pub == '' then
    return nil
  end
  local head = redis.call('ZPOPMIN', waiting)
  if head[1] then
    channel = channel .. ':' .. head[1]
  end
  return redis.pcall(pub, channel, '')
end
