-- Reset the TTL of a dlock mutex if ARGV[1] owns it; never create it.
-- KEYS[1] lock hash   ARGV[1] owner   ARGV[2] ttl ms
-- Returns 1 when extended, 0 when not held by owner.
return extend_holding(KEYS[1], ARGV[1], ARGV[2])
