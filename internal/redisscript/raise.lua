-- Record a fencing token handed out by a quorum of servers (Redlock): if ARGV[1]
-- holds the plain mutex, raise the token of its lock record to ARGV[2] (never
-- lower it), so that every later acquisition on this server draws a greater
-- token.
-- KEYS[1] lock record   ARGV[1] owner   ARGV[2] token (decimal)
-- Returns 1 when recorded, 0 when the owner does not hold the lock here.
local v = redis.call('GET', KEYS[1])
if not v then
  return 0
end
local t, owner, waited, meta, _, d = record(v)
if not t then
  return not_record()
end
if owner ~= ARGV[1] then
  return 0
end
local top = tonumber(ARGV[2])
if t < top then
  redis.call('SET', KEYS[1], held_record(b36(top), owner, meta, waited, d), 'KEEPTTL')
end
return 1
