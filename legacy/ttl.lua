-- Time left on a legacy lock owned by ARGV[5]: until the stamp runs out (see
-- remaining), or the real expiry if that comes first.
-- Returns the ms left, or -2 when not held by the owner.
local now = now_ms()
local s, err = owned(now)
if err then
  return err
end
if not s then
  return -2
end
local r = remaining(s, now)
local p = redis.call('PTTL', KEYS[1])
if p >= 0 and p < r then
  r = p
end
return r
