-- Shared head of the scripts that free a plain dlock mutex (prepended to them).

-- wake_next wakes the process that has waited longest for the lock: it takes the
-- first hub id off the waiting set and publishes '@' .. id on the wake channel,
-- which only that process acts on. It goes back on the set if its attempt loses
-- to a newcomer, with its old arrival. With nobody on the set (it expired), any
-- waiting process may take the message (''). It returns the publish reply (an
-- error table when the server refused it: a failed wake must not fail the
-- caller).
local function wake_next(waiting, pub, channel)
  if not pub or pub == '' then
    return nil
  end
  local head = redis.call('ZPOPMIN', waiting)
  local msg = ''
  if head[1] then
    msg = '@' .. head[1]
  end
  return redis.pcall(pub, channel, msg)
end
