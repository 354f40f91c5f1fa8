-- Read a legacy lock without changing it (lib.lua is prepended).
-- Returns {stamp or '', owner or '', last token, metadata, ms left or -2}: the
-- owner and metadata are dlock's when the key holds the stamp a dlock locker
-- wrote, and empty when an old client holds it.
local now = now_ms()
local cur = redis.call('GET', KEYS[1])
local h = redis.call('HMGET', KEYS[2], 'o', 'v', 't', 'm')
local token = h[3] or '0'
if not cur then
  return {'', '', token, '', -2}
end
local s = stamp(cur)
if not s then
  return conflict(cur)
end
if not live(s, now) then
  return {cur, '', token, '', -2}
end
if h[1] and h[2] == cur then
  return {cur, h[1], token, h[4] or '', left(s, now)}
end
return {cur, '', token, '', left(s, now)}
