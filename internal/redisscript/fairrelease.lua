-- Release a fair dlock mutex held by ARGV[1] and hand it to the first live waiter
-- of the queue. With ARGV[6] (an abandoned acquisition) also take ARGV[1]'s
-- entry ARGV[7] out of the queue.
-- ARGV[1] owner   ARGV[2] the holding's token in base 36, which the released
-- record keeps ('' when not known: the record keeps its own)
-- ARGV[3] claim time ms   ARGV[4] publish command ('PUBLISH', 'SPUBLISH' or '')
-- ARGV[5] wake channel
-- ARGV[6] '' for a release; for an abandoned acquisition, the lifetime (ms) of
-- the owner's abandon mark KEYS[5], which stops an attempt of the same
-- acquisition that reaches the server after this script from queueing again or
-- taking the lock ('0': no attempt can still arrive, no mark).
-- ARGV[7] the owner's queue entry, whose key is KEYS[4] (see fairmutex.lua)
-- ARGV[8] for an abandoned acquisition, its TTL ms ('' when not known): a lock
-- handed over to the owner that it never claimed carries the claim time as its
-- TTL, which may be longer; the released record lives at most this long.
-- Returns 1 when released, 0 when not held by owner.
-- A release of a holding that nobody queued behind (not marked) makes one call:
-- SET ... KEEPTTL GET, which writes the released record and returns the
-- holding's. A server out of memory refuses that SET but allows DEL: the
-- release then reads the record and deletes it.
if ARGV[6] ~= '' then
  if ARGV[6] ~= '0' then
    redis.call('SET', KEYS[5], '1', 'PX', ARGV[6])
  end
  if redis.call('DEL', KEYS[4]) == 1 then
    redis.call('LREM', KEYS[3], 1, ARGV[7])
  end
end
local want = ARGV[2]
if want == '' then
  want = '0'
end
local old = redis.pcall('SET', KEYS[1], '-' .. want, 'KEEPTTL', 'GET')
local full = false
if type(old) == 'table' and old.err then
  if string.sub(old.err, 1, 9) == 'WRONGTYPE' then
    -- A lock hash: a lock of another kind.
    local e = not_owned(redis.call('HGET', KEYS[1], 'o'))
    if e then
      return e
    end
    return 0
  end
  if string.sub(old.err, 1, 3) ~= 'OOM' then
    return old
  end
  full = true
  old = redis.call('GET', KEYS[1])
end
if not old then
  if not full then
    -- Nothing was there: SET made a key without expiry.
    redis.call('DEL', KEYS[1])
  end
  return 0
end
local t, owner, waited, _, t36 = record(old)
if not t or owner ~= ARGV[1] then
  if not full then
    redis.call('SET', KEYS[1], old, 'KEEPTTL')
  end
  if not t then
    return not_record()
  end
  return 0
end
if full then
  redis.call('DEL', KEYS[1])
  return 1
end
local head, more
if waited then
  head, more = pop_waiting()
end
if head then
  local n = draw(t, nil)
  give(head, n, ARGV[3], ARGV[4], ARGV[5])
elseif want == '0' or more then
  -- The released record keeps the holding's token, marked when waiters may be
  -- left in the queue.
  local f = '-'
  if more then
    f = '+'
  end
  if ARGV[8] ~= '' and redis.call('PTTL', KEYS[1]) > tonumber(ARGV[8]) then
    redis.call('SET', KEYS[1], f .. t36, 'PX', ARGV[8])
  else
    redis.call('SET', KEYS[1], f .. t36, 'KEEPTTL')
  end
end
return 1
