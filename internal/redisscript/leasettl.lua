-- Time left on the lease of holder ARGV[1] of a lock with several holders.
-- leases.lua is prepended (after token.lua and fairlib.lua).
-- ARGV[2] the kind's marker field of the lock hash
-- Returns the time left in ms, or -2 when ARGV[1] holds no lease.
local e = kind_error(ARGV[2])
if e then
  return e
end
local now = now_ms()
local s = lease_end(ARGV[1], now)
if not s then
  return -2
end
return s - now
