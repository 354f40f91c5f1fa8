-- Remove a legacy lock whatever holds it, if the key still holds stamp ARGV[1]
-- (the one just read); the companion keeps its token, so tokens keep increasing.
-- Returns 1 when removed, 0 when the key changed meanwhile.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('HDEL', KEYS[2], 'o', 'v', 'm')
return 1
