-- Reset the TTLs of many dlock mutexes, each if its owner holds it; never create
-- one. Every key must live on this server (one slot on Redis Cluster).
-- ARGV[1] '1' when the keys are plain mutexes' lock records, '' for lock hashes
-- KEYS[i] lock key   ARGV[2i] its owner   ARGV[2i+1] its ttl ms
-- Returns one entry per key: 1 when extended, 0 when not held by its owner, or
-- the error of a key that holds foreign data (the others are still extended).
-- Plain records are read with one MGET for all of them, so that a renewal costs
-- the server about one PEXPIRE per lock; a key MGET finds no string at (a lock
-- gone, or foreign data) takes extend_holding's own read.
local out = {}
if ARGV[1] == '1' then
  local vals = redis.call('MGET', unpack(KEYS))
  for i, key in ipairs(KEYS) do
    local v = vals[i]
    if v then
      local t, o, _, _, _, d = record(v)
      if not t then
        out[i] = not_record()
      elseif o == ARGV[2 * i] and d then
        out[i] = extend_holding(key, o, ARGV[2 * i + 1], true) -- with its lock-delay
      elseif o == ARGV[2 * i] then
        redis.call('PEXPIRE', key, ARGV[2 * i + 1])
        out[i] = 1
      else
        out[i] = 0
      end
    else
      out[i] = extend_holding(key, ARGV[2 * i], ARGV[2 * i + 1], true)
    end
  end
  return out
end
for i, key in ipairs(KEYS) do
  out[i] = extend_holding(key, ARGV[2 * i], ARGV[2 * i + 1], false)
end
return out
