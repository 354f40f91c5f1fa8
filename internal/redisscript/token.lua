-- Shared head of the scripts that hand out fencing tokens (prepended to them).

-- next_token draws the next fencing token from the counter at key fence and
-- returns it as a number and in decimal. The token is max(last + 1, server time
-- in microseconds): strictly increasing while the counter lives, and still
-- increasing after the counter is lost (restart without persistence, eviction,
-- deletion) as long as the server clock does not step back. The counter is set
-- to the time and read in one call, and set again in the rare case that the time
-- was not above the last token; it lives retention ms. tm, when given, is a
-- TIME reply the caller has already read.
-- token_after is the token formula itself, for scripts that keep the last
-- token elsewhere (the legacy protocol's companion hash): max(last + 1, the
-- time of TIME reply now in microseconds). bumped reports that last won.
local function token_after(last, now)
  local token = tonumber(now[1]) * 1000000 + tonumber(now[2])
  if last and last >= token then
    return last + 1, true
  end
  return token, false
end

local function next_token(fence, retention, tm)
  local now = tm or redis.call('TIME')
  local t = now[1] .. string.sub('00000' .. now[2], -6) -- cheaper than format
  local last = tonumber(redis.call('SET', fence, t, 'PX', retention, 'GET') or '0')
  local token, bumped = token_after(last, now)
  if bumped then
    t = string.format('%.0f', token)
    redis.call('SET', fence, t, 'PX', retention)
  end
  return token, t
end
