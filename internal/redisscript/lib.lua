-- The checks every dlock script shares; prepended to each script.

-- conflict returns the error reply of a key that holds a hash that is not a
-- dlock what ('lock' when nil).
local function conflict(what)
  return redis.error_reply('DLOCKCONFLICT key holds a hash that is not a dlock ' .. (what or 'lock'))
end

-- not_owned returns the error reply of a lock hash KEYS[1] that exists without
-- an owner (owner, its field o, is false): foreign data; nil otherwise, when the
-- lock is free or held by another owner.
local function not_owned(owner)
  if not owner and redis.call('EXISTS', KEYS[1]) == 1 then
    return conflict()
  end
  return nil
end
