-- Take a fair (FIFO) dlock mutex: granted only to the head of its queue.
-- ARGV[1] owner   ARGV[2] ttl ms   ARGV[3] fence retention ms   ARGV[4] metadata
-- ARGV[5] '1' to join the queue (or refresh the entry) when not taken
-- ARGV[6] queue entry lifetime ms, also the time a head has to claim a hand-over
-- ARGV[7] publish command ('PUBLISH', 'SPUBLISH' or '')   ARGV[8] wake channel
-- A lock handed over to this owner by a release (o = owner) is claimed: its TTL is
-- set to ARGV[2].
-- Returns {1, token} when taken, {0, pttl} otherwise, {2, 0} when the owner's
-- acquisition was abandoned.
-- Free with nobody queued: five calls. A claim after a hand-over: two.
if redis.call('EXISTS', KEYS[1], KEYS[3], KEYS[5]) == 0 then
  return {1, grant(ARGV[1], ARGV[2], ARGV[4], ARGV[3], nil)}
end
local f = redis.call('HMGET', KEYS[1], 'o', 't')
if f[1] == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if ARGV[4] ~= '' then
    redis.call('HSET', KEYS[1], 'm', ARGV[4])
  end
  return {1, tonumber(f[2])}
end
if redis.call('EXISTS', KEYS[5]) == 1 then
  return {2, 0}
end
if not f[1] then
  local e = not_owned(f[1])
  if e then
    return e
  end
  -- Free, with waiters queued: the lock is the first's.
  if redis.call('LINDEX', KEYS[3], 0) == ARGV[1] then
    redis.call('LPOP', KEYS[3])
    redis.call('ZREM', KEYS[4], ARGV[1])
    return {1, grant(ARGV[1], ARGV[2], ARGV[4], ARGV[3], nil)}
  end
  handoff(ARGV[3], ARGV[6], ARGV[7], ARGV[8])
end
if ARGV[5] == '1' then
  local tm = redis.call('TIME')
  if redis.call('ZADD', KEYS[4], ms(tm) + tonumber(ARGV[6]), ARGV[1]) == 1 then
    redis.call('RPUSH', KEYS[3], ARGV[1])
  end
  redis.call('PEXPIRE', KEYS[3], ARGV[6])
  redis.call('PEXPIRE', KEYS[4], ARGV[6])
  -- A queued waiter is woken by the hand-over and comes back to refresh its
  -- entry: the holder's TTL would not change when it tries next.
  return {0, -1}
end
return {0, redis.call('PTTL', KEYS[1])}
