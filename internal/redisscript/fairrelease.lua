-- Release a fair dlock mutex held by ARGV[1] and hand it to the first live waiter
-- of the queue. With ARGV[6] (an abandoned acquisition) also take ARGV[1]'s
-- entry ARGV[7] out of the queue.
-- ARGV[1] owner   ARGV[2] fence retention ms   ARGV[3] claim time ms
-- ARGV[4] publish command ('PUBLISH', 'SPUBLISH' or '')   ARGV[5] wake channel
-- ARGV[6] '' for a release; for an abandoned acquisition, the lifetime (ms) of
-- the owner's abandon mark KEYS[5], which stops an attempt of the same
-- acquisition that reaches the server after this script from queueing again or
-- taking the lock ('0': no attempt can still arrive, no mark).
-- ARGV[7] the owner's queue entry, whose key is KEYS[4] (see fairacquire.lua)
-- Returns 1 when released, 0 when not held by owner.
-- A release of a holding that nobody queued behind (no field q) makes two calls.
if ARGV[6] ~= '' then
  if ARGV[6] ~= '0' then
    redis.call('SET', KEYS[5], '1', 'PX', ARGV[6])
  end
  if redis.call('DEL', KEYS[4]) == 1 then
    redis.call('LREM', KEYS[3], 1, ARGV[7])
  end
end
local f = redis.call('HMGET', KEYS[1], 'o', 'm', 'q')
if f[1] ~= ARGV[1] then
  local e = not_owned(f[1])
  if e then
    return e
  end
  return 0
end
local head
if f[3] then
  head = pop_waiting()
end
if not head then
  redis.call('DEL', KEYS[1])
  return 1
end
if f[2] then
  redis.call('HDEL', KEYS[1], 'm') -- the rest is overwritten by the hand-over
end
give(head, ARGV[2], ARGV[3], ARGV[4], ARGV[5])
return 1
