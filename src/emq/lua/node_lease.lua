-- node_lease: (free | held by owner) -> held by owner, for ttl_ms
--
-- Takes or renews the lease on an id-minting node number. Not a job transition: it keeps two
-- live processes from minting ids with the same node number. Safety belt: a lease held by
-- another owner is never overwritten.
--
-- KEYS[1] node       STRING  {emq}:node:<n>, value = owner
-- ARGV[1] owner      string  the caller's random owner id
-- ARGV[2] ttl_ms     integer lease length, ms
-- Returns: 1 when the caller holds the lease, 0 when another owner does
-- Errors: none
-- Derives: nothing
local k_node = KEYS[1]
local owner = ARGV[1]
local ttl_ms = ARGV[2]

local cur = redis.call('GET', k_node)
if cur and cur ~= owner then return 0 end
redis.call('SET', k_node, owner, 'PX', ttl_ms)
return 1
