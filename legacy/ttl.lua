-- Time left on a legacy lock owned by ARGV[5] (see left).
-- Returns the ms left, or -2 when not held by the owner.
local now = now_ms()
local s, err = owned(now)
if err then
  return err
end
if not s then
  return -2
end
return left(s, now)
