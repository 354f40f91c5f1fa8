-- Take a permit of a dlock semaphore (token.lua, fairlib.lua, leases.lua and
-- semlib.lua are prepended). Waiters queue in arrival order, and free permits
-- go to the head of the queue: to the caller when it is the head (or nobody
-- queues), otherwise handed to the head for ARGV[6] ms (it claims the permit on
-- its next attempt) and the head is woken by name.
-- ARGV[1] owner   ARGV[2] ttl ms   ARGV[3] fence retention ms   ARGV[4] metadata
-- ARGV[5] '1' to join the queue (or refresh the entry) when no permit is free
-- ARGV[6] queue entry lifetime ms, also the time a head has to claim a hand-over
-- ARGV[7] publish command ('PUBLISH', 'SPUBLISH' or '')   ARGV[8] wake channel
-- ARGV[9] the Client's number of permits ('0': it adopts the stored size)
-- KEYS[7] the stored size (semresize.lua): a hash of n, the size in force, and
-- i, the size before the first resize. Without it, the size is ARGV[9], kept
-- in the lock hash's field n while permits are held.
-- Returns {1, token} when taken (also when the owner holds a permit already: a
-- retry, or a permit handed over; its TTL is reset), {0, ms until the first
-- lease ends} otherwise, {2, 0} when the owner's acquisition was abandoned. A
-- Client whose number is neither the stored size nor its size before the first
-- resize (nor, without a stored size, that of the holders) gets an error
-- DLOCKLIMIT n, n the size in force ('0' when there is none to adopt).
if abandoned(KEYS[5]) then
  return {2, 0}
end
local e = kind_error('n')
if e then
  return e
end
local n = semaphore_size(ARGV[9])
if not n then
  return redis.error_reply('DLOCKLIMIT ' .. (size_in_force() or '0'))
end
local o, now = ARGV[1], now_ms()
drop_dead(now)
if redis.call('ZSCORE', KEYS[6], o) then
  redis.call('ZADD', KEYS[6], now + tonumber(ARGV[2]), o)
  if ARGV[4] ~= '' then
    redis.call('HSET', KEYS[1], 'm:' .. o, ARGV[4])
  end
  settle(now)
  return {1, tonumber(redis.call('HGET', KEYS[1], 't:' .. o))}
end
local free = tonumber(n) - redis.call('ZCARD', KEYS[6])
local reached
free, reached = hand_out(free, o, now, ARGV[6], ARGV[3], ARGV[7], ARGV[8])
redis.call('HSET', KEYS[1], 'n', n)
if reached or free > 0 then
  dequeue(o)
  local token = hold(o, now, ARGV[2], ARGV[4], ARGV[3])
  settle(now)
  return {1, token}
end
if ARGV[5] == '1' then
  enqueue(o, now, ARGV[6])
end
settle(now)
local first = first_end()
if not first then
  return {0, -1}
end
return {0, first - now}
