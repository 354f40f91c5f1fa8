-- Move the stamp of a legacy lock owned by ARGV[5] to now + ttl; never create it
-- and never move the stamp back.
-- ARGV[6] ttl ms   ARGV[7] '1' to set the real expiry   ARGV[8] fence retention ms
-- Returns 1 when extended, 0 when not held by the owner.
local now = now_ms()
local s, err = owned(now)
if err then
  return err
end
if not s then
  return 0
end
local n = math.floor((now + tonumber(ARGV[6])) / unit) + 1
if n < s then
  n = s
end
write(n, now, ARGV[7])
redis.call('HSET', KEYS[2], 'v', fmt(n))
redis.call('PEXPIRE', KEYS[2], ARGV[8])
return 1
