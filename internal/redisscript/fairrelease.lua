-- Release a fair dlock mutex held by ARGV[1] and hand it to the head of the queue;
-- in every case take ARGV[1] out of the queue (a waiter giving up).
-- ARGV[1] owner   ARGV[2] fence retention ms   ARGV[3] claim time ms
-- ARGV[4] publish command ('PUBLISH', 'SPUBLISH' or '')   ARGV[5] wake channel
-- ARGV[6] '' for a release; for an abandoned acquisition, the lifetime (ms) of
-- the owner's abandon mark KEYS[5], which stops an attempt of the same
-- acquisition that reaches the server after this script from queueing again or
-- taking the lock.
-- Returns 1 when released, 0 when not held by owner.
if ARGV[6] ~= '' then
  redis.call('SET', KEYS[5], '1', 'PX', ARGV[6])
end
dequeue(ARGV[1])
local owner = redis.call('HGET', KEYS[1], 'o')
if owner ~= ARGV[1] then
  if not owner and redis.call('EXISTS', KEYS[1]) == 1 then
    return redis.error_reply('DLOCKCONFLICT key holds a hash that is not a dlock lock')
  end
  return 0
end
redis.call('DEL', KEYS[1])
prune(now_ms())
handoff(ARGV[2], ARGV[3], ARGV[4], ARGV[5])
return 1
