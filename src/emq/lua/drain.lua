-- drain: pending | schedule -> (removed: rows deleted)
--
-- Deletes waiting jobs (of every lane), at most limit per call so no call holds the server
-- for long; the
-- caller repeats until a call removes fewer than limit. Leased and dead jobs are kept.
-- Safety belt: each id leaves its set together with its row and dedup key. Packed jobs
-- (layout 3) go first: all at once when the call's limit covers them, else popped from
-- ready in order (a tombstone there is dropped without counting).
-- Flows (docs/flows.md): a drained child is counted for its parent as 'removed', as remove
-- does (in this step, or through the outbox for a parent in another queue), so a parent
-- whose last children were drained is pending (and a later call of the drain takes it too);
-- a drained parent (ready, or scheduled for a retry) takes its flow:<id> record with it.
-- At maxmemory (allow-oom): sent again with maxlen 0 after the server refused the plain call
--   for memory: no event; a flow's counts (and outbox entries) are a few bytes next to the
--   rows it deletes.
--
-- KEYS[1] pending    ZSET    waiting jobs
-- KEYS[2] schedule   ZSET    delayed jobs
-- KEYS[3] events     STREAM  lifecycle events
-- KEYS[4] meta       HASH    queue flags (lanes)
-- ARGV[1] prefix     string  the queue's key prefix, emq:{<queue>}:
-- ARGV[2] maxlen     integer event stream cap (~); 0 = no events; -1 = never trim
-- ARGV[3] limit      integer most jobs to delete in this call, 1..10000
-- Returns: the number of jobs deleted
-- Errors: none
-- Derives: packed HASH, ready LIST (layout 3), job:<id> HASH, de:<dedup> STRING, lane:<L>:pending ZSET, lanes:ring ZSET,
--   lanes:later ZSET, lanes:full SET, lanes:conf HASH (read only), events:archived STRING
--   (read only), flow:<id> HASH, flow:<id>:results HASH, flow:<parent> HASH, waiting ZSET,
--   wake LIST, outbox HASH (a flow's child or parent: docs/flows.md), logs:<id> LIST (a
--   retried job's log lines go with it)
-- Flags: allow-oom
-- Includes: clock, events, flows, lanes, packed
local k_pending = KEYS[1]
local k_schedule = KEYS[2]
local k_events = KEYS[3]
local k_meta = KEYS[4]
local prefix = ARGV[1]
local maxlen = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])

use_events(k_events, maxlen)
use_lanes(prefix, k_meta)

local now = server_ms()
local removed = drop_packed(prefix, limit)  -- packed jobs (layout 3) first
local sets = {k_pending}
if lane_mode then
  for _, lane in ipairs(known_lanes()) do sets[#sets + 1] = lane_pending_key(k_pending, lane) end
  sets[1] = k_schedule  -- known_lanes() starts with the default lane: pending is in the list
else
  sets[2] = k_schedule
end
for _, set in ipairs(sets) do
  if removed < limit then
    local ids = redis.call('ZRANGE', set, 0, limit - removed - 1)
    for _, id in ipairs(ids) do
      local row = prefix .. 'job:' .. id
      local f = redis.call('HMGET', row, 'dedup', 'parent', 'on_failure', 'children_left')
      if f[1] and redis.call('GET', prefix .. 'de:' .. f[1]) == id then
        redis.call('DEL', prefix .. 'de:' .. f[1])
      end
      if f[4] then  -- a flow's parent: its record goes with it
        redis.call('DEL', prefix .. 'flow:' .. id, prefix .. 'flow:' .. id .. ':results')
      end
      redis.call('DEL', row, prefix .. 'logs:' .. id)
      redis.call('ZREM', set, id)
      if f[2] then flow_child_done(prefix, k_pending, f[2], id, 'removed', '', f[3], now) end
    end
    removed = removed + #ids
  end
end
if removed > 0 then emit('event', 'drained', 'count', removed) end
return finish(removed)
