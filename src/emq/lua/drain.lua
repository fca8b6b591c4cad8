-- drain: pending | schedule -> (removed: rows deleted)
--
-- Deletes waiting jobs, at most limit per call so no call holds the server for long; the
-- caller repeats until a call removes fewer than limit. Leased and dead jobs are kept.
-- Safety belt: each id leaves its set together with its row and dedup key.
--
-- KEYS[1] pending    ZSET    waiting jobs
-- KEYS[2] schedule   ZSET    delayed jobs
-- KEYS[3] events     STREAM  lifecycle events
-- ARGV[1] prefix     string  the queue's key prefix, emq:{<queue>}:
-- ARGV[2] maxlen     integer event stream cap (~); 0 = no events; -1 = never trim
-- ARGV[3] limit      integer most jobs to delete in this call, 1..10000
-- Returns: the number of jobs deleted
-- Errors: none
-- Derives: job:<id> HASH, de:<dedup> STRING, events:archived STRING (read only)
local k_pending = KEYS[1]
local k_schedule = KEYS[2]
local k_events = KEYS[3]
local prefix = ARGV[1]
local maxlen = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])

use_events(k_events, maxlen)

local removed = 0
for _, set in ipairs({k_pending, k_schedule}) do
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
