-- Reset the TTLs of many dlock mutexes, each if its owner holds it; never create
-- one. Every key must live on this server (one slot on Redis Cluster).
-- KEYS[i] lock hash   ARGV[2i-1] its owner   ARGV[2i] its ttl ms
-- Returns one entry per key: 1 when extended, 0 when not held by its owner, or
-- the error of a key that holds foreign data (the others are still extended).
local out = {}
for i, key in ipairs(KEYS) do
  out[i] = extend_holding(key, ARGV[2 * i - 1], ARGV[2 * i])
end
return out
