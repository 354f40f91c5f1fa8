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

-- The plain mutex keeps everything in one string at its lock key, the lock
-- record: "FT OWNER[ METADATA]" while held, and "-T" once released, until the
-- holding's TTL runs out. T is the newest fencing token drawn for the key, in
-- base 36 (so that a record with an anonymous owner fits in 44 bytes, Redis's
-- short string encoding); F is '+' for a holding that a waiter may wait for (its
-- release wakes one), '-' otherwise. OWNER never holds a space; METADATA may.
local B36 = '0123456789abcdefghijklmnopqrstuvwxyz'

-- not_record returns the error reply of a lock key that holds a string that is
-- no lock record.
local function not_record()
  return redis.error_reply('DLOCKCONFLICT key holds a string that is not a dlock lock record')
end

-- b36 writes the non-negative integer n in base 36.
local function b36(n)
  local s = ''
  repeat
    local d = n % 36
    s = string.sub(B36, d + 1, d + 1) .. s
    n = (n - d) / 36
  until n == 0
  return s
end

-- record parses the lock record v: its token (a number), its owner (false when
-- released), whether it is marked as waited for, its metadata (false when none)
-- and its token as written. It returns nil when v is no lock record.
local function record(v)
  local w, t, rest = string.match(v, '^([-+])([0-9a-z]+)(.*)$')
  if not t then
    return nil
  end
  if rest == '' then
    return tonumber(t, 36), false, w == '+', false, t
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
  return tonumber(t, 36), owner, w == '+', meta, t
end

-- held_record returns the record of a holding by owner with token t (base 36),
-- metadata meta ('' or false for none), marked as waited for when w is true.
local function held_record(t, owner, meta, w)
  local v = t .. ' ' .. owner
  if meta and meta ~= '' then
    v = v .. ' ' .. meta
  end
  if w then
    return '+' .. v
  end
  return '-' .. v
end

-- extend_holding resets to ttl ms the TTL of owner's holding at key, and never
-- creates it: a plain mutex's lock record when plain is true, a lock hash
-- (field o = owner) otherwise. It returns 1 when extended, 0 when owner does
-- not hold it, and an error reply (a table with field err, not raised, so
-- that a script extending several holdings goes on) when key holds data that
-- is no lock of that kind. One read and one PEXPIRE.
local function extend_holding(key, owner, ttl, plain)
  if plain then
    local v = redis.pcall('GET', key)
    if type(v) == 'table' then
      return redis.error_reply('DLOCKCONFLICT key holds data that is not a dlock lock record')
    end
    if not v then
      return 0
    end
    local t, o = record(v)
    if not t then
      return not_record()
    end
    if o ~= owner then
      return 0
    end
  else
    local o = redis.pcall('HGET', key, 'o')
    if type(o) == 'table' then
      return redis.error_reply('DLOCKCONFLICT key holds data that is not a dlock lock hash')
    end
    if o ~= owner then
      if not o and redis.call('EXISTS', key) == 1 then
        return conflict()
      end
      return 0
    end
  end
  redis.call('PEXPIRE', key, ttl)
  return 1
end
