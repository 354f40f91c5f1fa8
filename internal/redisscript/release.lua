-- Delete a dlock mutex if ARGV[1] owns it; touch nothing otherwise. When the
-- holding is marked as waited for (field w), wake the process that has waited
-- longest (see wake.lua).
-- KEYS[1] lock hash   KEYS[2] waiting processes (see acquire.lua)   ARGV[1] owner
-- ARGV[2] publish command ('PUBLISH', 'SPUBLISH', or '' for none)   ARGV[3] wake channel
-- Returns 1 when deleted, 0 when not held by owner, or the error of the wake-up
-- (a table with field err) when deleted but the wake could not be published.
local f = redis.call('HMGET', KEYS[1], 'o', 'w')
local owner = f[1]
if owner == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if f[2] then
    local r = wake_next(KEYS[2], ARGV[2], ARGV[3])
    if type(r) == 'table' and r.err then
      return {r.err}
    end
  end
  return 1
end
local e = not_owned(owner)
if e then
  return e
end
return 0
