-- The checks every dlock script shares; prepended to each script.

-- conflict returns the error reply of a key that holds a hash that is not a
-- dlock what ('lock' when nil).
local function conflict(what)
  return redis.error_reply('DLOCKCONFLICT key holds a hash that is not a dlock ' .. (what or 'lock'))
end

-- not_owned returns the error reply of a lock hash KEYS[1] that exists without
-- an owner (owner, its field o, is false): foreign data; nil otherwise, when the
-- lock is free or held by another owner.
local function not_owned(owner)
  if not owner and redis.call('EXISTS', KEYS[1]) == 1 then
    return conflict()
  end
  return nil
end

-- A server out of memory (maxmemory, noeviction) refuses a write that may grow
-- it only when it is a script's first write: once a script has written, the
-- rest of it runs past the limit. So every acquisition, whatever it writes
-- first (a queue's dead entries popped, a lease that ended dropped), runs
-- refuse_full before its first write: SETRANGE key 0 '' is such a write, which
-- writes nothing (key, a string or none, keeps its value, and no key is made),
-- and which a full server refuses with OOM, as it refuses the plain lock's SET.
-- It returns the length of the string at key (0 when none). Renewals and
-- releases do not run it: their first write cannot grow the server (a DEL, a
-- PEXPIRE, a score removed before it is written again), and they work on a
-- full server.
local function refuse_full(key)
  return redis.call('SETRANGE', key, 0, '')
end

-- abandoned reports whether the abandon mark at key (a string '1') is set; it
-- reads it with refuse_full, the first call of an acquisition of a kind with
-- several holders or of the reentrant lock.
local function abandoned(key)
  return refuse_full(key) > 0
end

-- The plain mutex keeps everything in one string at its lock key, the lock
-- record: "FT OWNER[ METADATA]" while held, and "-T" once released, until the
-- holding's TTL runs out. T is the newest fencing token drawn for the key, in
-- base 36 (so that a record with an anonymous owner fits in 44 bytes, Redis's
-- short string encoding); F is '+' for a holding that a waiter may wait for (its
-- release wakes one), '-' otherwise. OWNER never holds a space; METADATA may.
-- A holding with a lock-delay of D ms is "FT~D OWNER[ METADATA]" (D in base
-- 36), and its key lives D ms past the holding's TTL: while its PTTL is at
-- most D the holding has run out and the key is in its lock-delay, which
-- nobody may take, and which no release or extend of the old holder ends. A
-- forced holding with a lock-delay leaves "-T~", in its lock-delay for its
-- whole PTTL (D).

-- not_record returns the error reply of a lock key that holds a string that is
-- no lock record.
local function not_record()
  return redis.error_reply('DLOCKCONFLICT key holds a string that is not a dlock lock record')
end

-- b36 writes the non-negative integer n in base 36. digits takes the digits
-- off n from the lowest, each ahead of the bytes of the ones taken before,
-- and makes one string of them (a string per digit, or a table, costs more).
local function digits(n, ...)
  local r = n % 36
  local q = (n - r) / 36
  if r < 10 then
    r = r + 48
  else
    r = r + 87
  end
  if q == 0 then
    return string.char(r, ...)
  end
  return digits(q, r, ...)
end

local function b36(n)
  return digits(n)
end

-- MAXTOKEN bounds the tokens a script takes from stored data: 2^53, above
-- which a Lua number loses integers (the server clock in microseconds reaches
-- it in the year 2255).
local MAXTOKEN = 9007199254740992

-- counter parses a fence counter's value: a decimal integer below MAXTOKEN, or
-- nil for anything else (foreign data).
local function counter(v)
  if not string.match(v, '^%d+$') then
    return nil
  end
  local n = tonumber(v)
  if n >= MAXTOKEN then
    return nil
  end
  return n
end

-- record parses the lock record v: its token (a number), its owner (false when
-- released), whether it is marked as waited for, its metadata (false when none)
-- and its token as written. It returns nil when v is no lock record.
-- The sixth value is the record's lock-delay in ms: nil when none, -1 for a
-- forced record in its delay ("-T~").
local function record(v)
  local w, t, tilde, dd, rest = string.match(v, '^([-+])([0-9a-z]+)(~?)([0-9a-z]*)(.*)$')
  if not t or #t > 11 or tonumber(t, 36) >= MAXTOKEN or #dd > 6 then
    return nil
  end
  local d = nil
  if tilde == '~' then
    d = -1
    if dd ~= '' then
      d = tonumber(dd, 36)
    end
  end
  if rest == '' then
    return tonumber(t, 36), false, w == '+', false, t, d
  end
  local owner, meta = string.match(rest, '^ ([^ ]+)(.*)$')
  if not owner then
    return nil
  end
  if meta == '' then
    meta = false
  else
    meta = string.sub(meta, 2)
  end
  return tonumber(t, 36), owner, w == '+', meta, t, d
end

-- delaying returns, for the lock record at key whose lock-delay is d (as
-- record returns it), the ms left of the key's lock-delay when the key is in
-- it, and false and the key's PTTL otherwise (a PTTL that counts the
-- delay: the holding has that PTTL minus d left). Without a delay it reads
-- nothing and returns false, nil.
local function delaying(key, d)
  if not d then
    return false, nil
  end
  local pttl = redis.call('PTTL', key)
  if d < 0 or pttl <= d then
    return math.max(pttl, 1), nil
  end
  return false, pttl
end

-- held_record returns the record of a holding by owner with token t (base 36),
-- metadata meta ('' or false for none), marked as waited for when w is true,
-- with a lock-delay of d ms when d is a positive number.
local function held_record(t, owner, meta, w, d)
  local v = t .. ' ' .. owner
  if d and d > 0 then
    v = t .. '~' .. b36(d) .. ' ' .. owner
  end
  if meta and meta ~= '' then
    v = v .. ' ' .. meta
  end
  if w then
    return '+' .. v
  end
  return '-' .. v
end
