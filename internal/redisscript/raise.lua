-- Record a fencing token handed out by a quorum of servers (Redlock): if ARGV[1]
-- holds the lock, raise its fence counter to ARGV[2] (never lower it) and store
-- ARGV[2] as the holding's token, so that every later acquisition on this server
-- draws a greater token.
-- KEYS[1] lock hash   KEYS[2] fence counter (one hash slot)
-- ARGV[1] owner   ARGV[2] token (decimal)   ARGV[3] fence retention ms
-- Returns 1 when recorded, 0 when the owner does not hold the lock here.
local owner = redis.call('HGET', KEYS[1], 'o')
if owner ~= ARGV[1] then
  local e = not_owned(owner)
  if e then
    return e
  end
  return 0
end
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
if not last or last < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
end
redis.call('HSET', KEYS[1], 't', ARGV[2])
return 1
