-- Give up an acquisition of a plain dlock mutex for good: remove its lock record
-- if ARGV[1] holds it (waking a waiting process as release.lua does), and mark
-- the owner as abandoned for ARGV[4] ms, so that an attempt of the same
-- acquisition that reaches the server after this script (sent earlier on
-- another connection) does not take the lock.
-- KEYS[1] lock record   KEYS[2] the owner's abandon mark   KEYS[3] waiting processes
-- ARGV[1] owner   ARGV[2] publish command ('' = none)   ARGV[3] wake channel
-- ARGV[4] mark lifetime ms ('0': no attempt can still arrive, no mark)
-- ARGV[5] the token (decimal) of the attempt being cleaned up, '' for any: a
--         holding of the owner with another token (taken anew by a later
--         attempt, see acquire.lua) stays
-- Returns 1 when a holding was released, 0 otherwise.
if ARGV[4] ~= '0' then
  redis.call('SET', KEYS[2], '1', 'PX', ARGV[4])
end
local v = redis.pcall('GET', KEYS[1])
if type(v) ~= 'string' then
  return 0 -- free, or a lock of another kind
end
local t, owner, waited, _, _, delay = record(v)
if not t then
  return not_record()
end
if owner ~= ARGV[1] or delaying(KEYS[1], delay) then
  return 0 -- another's, or run out and in its lock-delay
end
if (ARGV[5] or '') ~= '' and t ~= tonumber(ARGV[5]) then
  return 0
end
redis.call('DEL', KEYS[1])
if waited then
  wake_next(KEYS[3], ARGV[2], ARGV[3])
end
return 1
