-- Reset the TTL of a dlock mutex if ARGV[1] owns it; never create it (see
-- extend_holding in lib.lua).
-- KEYS[1] lock key   ARGV[1] owner   ARGV[2] ttl ms
-- ARGV[3] '1' for the plain mutex's lock record, absent for a lock hash
-- Returns 1 when extended, 0 when not held by owner.
return extend_holding(KEYS[1], ARGV[1], ARGV[2], ARGV[3] == '1')
