-- Store a result of dlock.Once beside a mutex (plain or fair): set KEYS[2] to
-- ARGV[2] for ARGV[3] ms if ARGV[1] holds the lock record at KEYS[1], in its
-- holding (not in a lock-delay after it).
-- KEYS[1] lock key   KEYS[2] result key
-- ARGV[1] owner   ARGV[2] value   ARGV[3] ttl ms
-- Returns 1 when stored, 0 when ARGV[1] does not hold the lock.
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' then
  return redis.error_reply('DLOCKCONFLICT key holds data that is not a dlock lock record')
end
if not v then
  return 0
end
local t, o, _, _, _, d = record(v)
if not t then
  return not_record()
end
if o ~= ARGV[1] or delaying(KEYS[1], d) then
  return 0
end
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
return 1
