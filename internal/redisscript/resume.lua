-- Take up a detached holding of the plain mutex: reset the TTL of the lock
-- record at KEYS[1] to ARGV[2] ms if ARGV[1] holds it with the fencing token
-- ARGV[3] (decimal), as extend.lua does; never create it.
-- KEYS[1] lock key   ARGV[1] owner   ARGV[2] ttl ms   ARGV[3] token
-- Returns 1 when extended, 0 when the key holds no such holding.
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'string' then
  local t, o = record(v)
  if t and o == ARGV[1] and t ~= tonumber(ARGV[3]) then
    return 0
  end
end
return extend_holding(KEYS[1], ARGV[1], ARGV[2], true)
