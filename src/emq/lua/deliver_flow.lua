-- deliver_flow: waiting -> pending | dead (a flow's parent, told of children in other queues)
--
-- The second step of a child's end in another queue (docs/flows.md, Across queues): the child's
-- own step wrote an outbox entry in its slot; the maintenance beat of the child's queue reads
-- it and delivers it here, in the parent's slot, then deletes it. Each entry is counted by
-- flow_count (includes/flows.lua) exactly as a same-queue child's end is: only while the
-- child's status in flow:<parent> is '' (unfinished), so a delivery replayed (a beat that died
-- before deleting the entry, two beats delivering at once) or one that arrives after the parent
-- ended changes nothing. The last child counted makes the parent pending; a fail_parent child's
-- death makes it dead (its own parent told in turn).
--
-- KEYS[1] pending    ZSET    waiting jobs of the default lane
-- KEYS[2] events     STREAM  lifecycle events
-- KEYS[3] wake       LIST    wake-up tokens for parked workers
-- KEYS[4] meta       HASH    queue flags (lanes)
-- ARGV[1] prefix     string  the parent queue's key prefix, emq:{<queue>}:
-- ARGV[2] maxlen     integer event stream cap (~); 0 = no events; -1 = never trim
-- ARGV[3..] (parent, child, status, on_failure, result)*
--           one group per entry: the parent's id, the child as '<id>@<queue>', its end
--           (completed | dead | cancelled | removed), its policy, its result JSON or ''
-- Returns: the number of entries counted (the others were counted before, or their parent
--   is gone)
-- Errors: none
-- Derives: job:<parent> HASH, flow:<parent> HASH, flow:<parent>:results HASH, waiting ZSET,
--   dead ZSET, metrics HASH, done:<parent> LIST, outbox HASH (a parent's own parent in
--   another queue), lane:<L>:pending ZSET, lanes:ring ZSET, events:archived STRING (read only)
-- Includes: clock, events, flows, lanes
local k_pending = KEYS[1]
local k_events = KEYS[2]
-- flow_count wakes a worker at prefix .. 'wake', which is k_wake
local k_wake = KEYS[3]
local k_meta = KEYS[4]
local prefix = ARGV[1]
local maxlen = tonumber(ARGV[2])
local GROUP = 5

use_events(k_events, maxlen)
use_lanes(prefix, k_meta)

local now = server_ms()
local counted = 0
for i = 3, #ARGV, GROUP do
  if flow_count(prefix, k_pending, ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 4], ARGV[i + 3],
      now) then
    counted = counted + 1
  end
end
return finish(counted)
