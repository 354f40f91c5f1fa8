-- Delete the legacy lock if it still holds the stamp ARGV[5] wrote and that stamp
-- has not run out; touch nothing else (the fleet's DEL, made safe).
-- Returns 1 when deleted, 0 when not held by the owner.
local now = now_ms()
local s, err = owned(now)
if err then
  return err
end
if redis.call('HGET', KEYS[2], 'o') == ARGV[5] then
  redis.call('HDEL', KEYS[2], 'o', 'm')
end
if not s then
  return 0
end
redis.call('DEL', KEYS[1])
return 1
