-- upgrade: a queue's keyspace layout -> the newest one (docs/keyspace.md, Layout versions)
--
-- Moves a queue from layout 1 or 2 to 3 in one step: writes meta's 'layout'. Layout 2 changed
-- how a call's events are appended (one entry per call, includes/events.lua), layout 3 adds
-- packed waiting jobs (packed, ready: includes/packed.lua) beside the rows; every script and
-- reader of this emq reads each older shape, so no key is rewritten: the entries already in
-- the stream and the rows already waiting stay as they are, and the stream's job-event count
-- (events:count) is started from them on the first append after the upgrade. Safety belt: a
-- queue in a newer layout is refused (check_layout) and a queue already in the newest is left
-- alone.
--
-- KEYS[1] meta       HASH    queue flags (layout)
-- ARGV[1] prefix     string  the queue's key prefix, emq:{<queue>}:
-- Returns: array: the layout before, the layout after
-- Errors: none
-- Derives: nothing
-- Includes: layout
local k_meta = KEYS[1]
local prefix = ARGV[1]

check_layout(redis.call('HGET', k_meta, 'layout'), prefix)
local before = queue_layout
if before < LAYOUT then redis.call('HSET', k_meta, 'layout', LAYOUT) end
return {before, LAYOUT}
