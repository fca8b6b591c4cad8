-- drain: pending | schedule -> (removed: rows deleted)
--
-- Deletes waiting jobs (of every lane), at most limit per call so no call holds the server
-- for long; the
-- caller repeats until a call removes fewer than limit. Leased and dead jobs are kept.
-- Safety belt: each id leaves its set together with its row and dedup key.
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
-- Derives: job:<id> HASH, de:<dedup> STRING, lane:<L>:pending ZSET, lanes:ring ZSET,
--   lanes:later ZSET, lanes:full SET, lanes:conf HASH (read only), events:archived STRING
--   (read only)
-- Includes: events, lanes
local k_pending = KEYS[1]
local k_schedule = KEYS[2]
local k_events = KEYS[3]
local k_meta = KEYS[4]
local prefix = ARGV[1]
local maxlen = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])

use_events(k_events, maxlen)
use_lanes(prefix, k_meta)

local removed = 0
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
      local dedup = redis.call('HGET', row, 'dedup')
      if dedup and redis.call('GET', prefix .. 'de:' .. dedup) == id then
        redis.call('DEL', prefix .. 'de:' .. dedup)
      end
      redis.call('DEL', row)
      redis.call('ZREM', set, id)
    end
    removed = removed + #ids
  end
end
if removed > 0 then emit('event', 'drained', 'count', removed) end
return finish(removed)
