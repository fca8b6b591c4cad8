-- node_lease: (free | held by owner) -> held by owner, for ttl_ms
--
-- Takes or renews the lease on an id-minting node number. Not a job transition: it keeps two
-- live processes from minting ids with the same node number. Safety belt: a lease held by
-- another owner is never overwritten. It also reads the server clock, which the minter
-- keeps as an offset to its monotonic clock, so ids follow the server's time, not the
-- producer's wall clock.
--
-- KEYS[1] node       STRING  {emq}:node:<n>, value = owner
-- ARGV[1] owner      string  the caller's random owner id
-- ARGV[2] ttl_ms     integer lease length, ms
-- Returns: {held, now_ms}: held is 1 when the caller holds the lease, 0 when another owner
--   does; now_ms is the server clock (TIME) in ms since the Unix epoch, read in both cases
-- Errors: none
-- Derives: nothing
-- Includes: none
local k_node = KEYS[1]
local owner = ARGV[1]
local ttl_ms = ARGV[2]

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cur = redis.call('GET', k_node)
if cur and cur ~= owner then return {0, now_ms} end
redis.call('SET', k_node, owner, 'PX', ttl_ms)
return {1, now_ms}
