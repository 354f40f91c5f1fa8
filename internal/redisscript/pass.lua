-- A process that no longer waits for a plain dlock mutex leaves the waiting set;
-- if it had been woken and nobody of it used the wake, it passes the wake on to
-- the next process, provided the lock is still free (wake.lua is prepended).
-- KEYS[1] lock record   KEYS[2] waiting processes
-- ARGV[1] hub id   ARGV[2] '1' to pass a wake on
-- ARGV[3] publish command ('' = none)   ARGV[4] wake channel
redis.call('ZREM', KEYS[2], ARGV[1])
if ARGV[2] == '1' then
  local v = redis.pcall('GET', KEYS[1])
  local free = not v
  if type(v) == 'string' then
    local t, owner = record(v)
    free = t and not owner
  end
  if free then
    wake_next(KEYS[2], ARGV[3], ARGV[4])
  end
end
return 1
