-- Take a fair (FIFO) dlock mutex: granted only to the head of its queue.
-- ARGV[1] owner   ARGV[2] ttl ms   ARGV[3] fence retention ms   ARGV[4] metadata
-- ARGV[5] '1' to join the queue (or refresh the entry) when not taken
-- ARGV[6] queue entry lifetime ms, also the time a head has to claim a hand-over
-- ARGV[7] publish command ('PUBLISH', 'SPUBLISH' or '')   ARGV[8] wake channel
-- A lock handed over to this owner by a release (o = owner) is claimed: its TTL is
-- set to ARGV[2] and the owner leaves the queue.
-- KEYS[5] the owner's abandon mark (see fairrelease.lua)
-- Returns {1, token} when taken, {0, pttl} otherwise, {2, 0} when the owner's
-- acquisition was abandoned.
if redis.call('EXISTS', KEYS[5]) == 1 then
  return {2, 0}
end
local now = now_ms()
prune(now)
local owner = redis.call('HGET', KEYS[1], 'o')
if owner == ARGV[1] then
  if ARGV[4] ~= '' then
    redis.call('HSET', KEYS[1], 'm', ARGV[4])
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  dequeue(ARGV[1])
  return {1, tonumber(redis.call('HGET', KEYS[1], 't'))}
end
if not owner then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    return redis.error_reply('DLOCKCONFLICT key holds a hash that is not a dlock lock')
  end
  local head = redis.call('LINDEX', KEYS[3], 0)
  if not head or head == ARGV[1] then
    dequeue(ARGV[1])
    return {1, grant(ARGV[1], ARGV[2], ARGV[4], ARGV[3])}
  end
  -- Free, but somebody queued first: the lock is theirs (expiry hand-over).
  handoff(ARGV[3], ARGV[6], ARGV[7], ARGV[8])
end
if ARGV[5] == '1' then
  if not redis.call('ZSCORE', KEYS[4], ARGV[1]) then
    redis.call('RPUSH', KEYS[3], ARGV[1])
  end
  redis.call('ZADD', KEYS[4], now + tonumber(ARGV[6]), ARGV[1])
  redis.call('PEXPIRE', KEYS[3], ARGV[6])
  redis.call('PEXPIRE', KEYS[4], ARGV[6])
end
return {0, redis.call('PTTL', KEYS[1])}
