-- complete: active -> (completed: row deleted)
--
-- Finishes jobs whose lease the caller still holds; a worker acknowledges a batch in one step.
-- Safety belt: the job must be in active with an unexpired deadline (server clock) and the
-- row's token must equal the caller's; otherwise nothing changes for that job and it reports
-- lost, so a stale worker can never delete a job that was recovered and re-leased.
--
-- KEYS[1] active     ZSET    leased jobs, score = lease deadline ms
-- KEYS[2] metrics    HASH    counters (completed)
-- KEYS[3] events     STREAM  lifecycle events
-- KEYS[4] meta       HASH    queue flags (lanes, vtime, concurrency)
-- ARGV[1] prefix     string  the queue's key prefix, emq:{<queue>}:
-- ARGV[2] maxlen     integer event stream cap (~); 0 = no events; -1 = never trim
-- ARGV[3..] (id, token)*  one pair per job
-- Returns: array, per job: 'completed' | 'lost' (a lease_lost event is appended) | 'gone' (no
--   row: already completed, by a resent call whose first reply was lost, or removed)
-- Errors: none
-- Derives: job:<id> HASH, de:<dedup> STRING, lane:<L>:active SET, lanes:full SET,
--   lanes:ring ZSET, wake LIST (a freed slot of a limited queue or lane wakes a worker),
--   events:archived STRING (read only)
local k_active = KEYS[1]
local k_metrics = KEYS[2]
local k_events = KEYS[3]
local k_meta = KEYS[4]
local prefix = ARGV[1]
local maxlen = tonumber(ARGV[2])

use_events(k_events, maxlen)
use_lanes(prefix, k_meta)

local now = server_ms()
local out = {}
local ids, rows = {}, {}  -- completed: removed from active and deleted together, at the end
local seen = {}  -- a job named twice in one call completes once (the second is gone)
for i = 3, #ARGV, 2 do
  local id, token = ARGV[i], ARGV[i + 1]
  local row = prefix .. 'job:' .. id
  if seen[id] then
    out[#out + 1] = ANSWER.gone
  else
    local score = redis.call('ZSCORE', k_active, id)
    local f = redis.call('HMGET', row, 'token', 'attempts', 'dedup', 'lane')
    if not f[1] then
      out[#out + 1] = ANSWER.gone
    elseif score and tonumber(score) > now and f[1] == token then
      seen[id] = true
      ids[#ids + 1] = id
      rows[#rows + 1] = row
      lane_release(f[4], id)
      if f[3] and redis.call('GET', prefix .. 'de:' .. f[3]) == id then
        redis.call('DEL', prefix .. 'de:' .. f[3])
      end
      out[#out + 1] = ANSWER.completed
      emit('event', 'completed', 'job', id, 'attempts', f[2])
    else
      out[#out + 1] = ANSWER.lost
      emit('event', 'lease_lost', 'job', id, 'token', token, 'via', 'complete')
    end
  end
end
if #ids > 0 then
  redis.call('ZREM', k_active, unpack(ids))
  redis.call('DEL', unpack(rows))
  redis.call('HINCRBY', k_metrics, 'completed', #ids)
end
return finish(out)
