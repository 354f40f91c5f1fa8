-- Reset the TTLs of many dlock mutexes, each if its owner holds it; never create
-- one. Every key must live on this server (one slot on Redis Cluster).
-- ARGV[1] '1' when the keys are plain mutexes' lock records, '' for lock hashes
-- KEYS[i] lock key   ARGV[2i] its owner   ARGV[2i+1] its ttl ms
-- Returns one entry per key: 1 when extended, 0 when not held by its owner, or
-- the error of a key that holds foreign data (the others are still extended).
local plain = ARGV[1] == '1'
local out = {}
for i, key in ipairs(KEYS) do
  out[i] = extend_holding(key, ARGV[2 * i], ARGV[2 * i + 1], plain)
end
return out
