-- complete: active -> (completed: row deleted, or kept with state completed)
--
-- Finishes jobs whose lease the caller still holds; a worker acknowledges a batch in one step.
-- Safety belt: the job must be in active with an unexpired deadline (server clock) and the
-- row's token must equal the caller's; otherwise nothing changes for that job and it reports
-- lost, so a stale worker can never delete a job that was recovered and re-leased.
-- Results and retention (keep = 1): a job whose result_ttl_ms or keep_age_ms is above 0
-- keeps its row, in this same step, with state completed, completed_at, its token and (if
-- result_ttl_ms > 0) result and result_until, PEXPIREd to the larger of the two; with
-- keep_count > 0 its id joins completed, which is trimmed here (at most 1,000 ids a call)
-- to keep_count ids and to keep_age_ms, deleting the trimmed rows (a row whose result is
-- younger than its result_ttl_ms stays until then). keep = 0 is the plain path: nothing
-- kept, the groups carry no result. result() waiters on a job are told its outcome.
--
-- KEYS[1] active     ZSET    leased jobs, score = lease deadline ms
-- KEYS[2] metrics    HASH    counters (completed)
-- KEYS[3] events     STREAM  lifecycle events
-- KEYS[4] meta       HASH    queue flags (lanes, vtime, concurrency)
-- KEYS[5] completed  ZSET    kept completed jobs, score = completed_at ms (keep_count > 0)
-- ARGV[1] prefix     string  the queue's key prefix, emq:{<queue>}:
-- ARGV[2] maxlen     integer event stream cap (~); 0 = no events; -1 = never trim
-- ARGV[3] keep       integer 0 = nothing kept, groups (id, token); 1 = groups (id, token,
--                            result, result_ttl_ms): result is JSON text or '' (with
--                            ttl 0 it is kept only for a flow's parent: flow:<parent>:results)
-- ARGV[4] keep_age_ms integer keep_completed's max age, ms; 0 = no retention
-- ARGV[5] keep_count integer keep_completed's max count; 0 = no retention
-- ARGV[6..] (id, token)*  one pair per job; with keep = 1, (id, token, result, result_ttl_ms)
-- Returns: array, per job: 'completed' | 'lost' (a lease_lost event is appended) | 'gone' (no
--   row: already completed, by a resent call whose first reply was lost, or removed)
-- Errors: none
-- Derives: packed HASH (read only: a job without a row that waits packed is 'lost'),
--   job:<id> HASH, flow:<parent> HASH, flow:<parent>:results HASH, waiting ZSET,
--   pending ZSET, dead ZSET, metrics HASH (a flow's child: docs/flows.md),
--   de:<dedup> STRING, lane:<L>:active SET, lanes:full SET,
--   lanes:ring ZSET, wake LIST (a freed slot of a limited queue or lane wakes a worker),
--   done:<id> LIST (result() waiters), events:archived STRING (read only)
-- Includes: answers, clock, events, flows, lanes, waiters
local k_active = KEYS[1]
local k_metrics = KEYS[2]
local k_events = KEYS[3]
local k_meta = KEYS[4]
local k_completed = KEYS[5]
local prefix = ARGV[1]
local maxlen = tonumber(ARGV[2])
local keep = ARGV[3]
local keep_age_ms = tonumber(ARGV[4])
local keep_count = tonumber(ARGV[5])
local TRIM = 1000  -- kept ids trimmed per call, at most

use_events(k_events, maxlen)
use_lanes(prefix, k_meta)

local now = server_ms()
local out = {}
local kept = {}  -- keep = 1: score, id pairs for one ZADD to completed

-- keep = 1: keep one completed job's row (or delete it when neither keeps it); returns the
-- result text waiters are told ('' when not kept)
local function keep_row(row, id, result, ttl)
  local life = math.max(ttl, keep_age_ms)
  if life <= 0 then
    redis.call('DEL', row)
    return ''
  end
  if ttl > 0 then
    redis.call('HSET', row, 'state', 'completed', 'completed_at', now, 'result', result,
      'result_until', now + ttl)
  else
    redis.call('HSET', row, 'state', 'completed', 'completed_at', now)
    result = ''
  end
  redis.call('PEXPIRE', row, life)
  if keep_count > 0 then
    kept[#kept + 1] = now
    kept[#kept + 1] = id
  end
  return result
end

-- completed holds at most keep_count ids, none older than keep_age_ms: the oldest go (at most
-- TRIM per call), with their rows, unless a row's result is still within its result_ttl_ms
local function trim_kept()
  local old = redis.call('ZRANGEBYSCORE', k_completed, '-inf', now - keep_age_ms,
    'LIMIT', 0, TRIM)
  local over = math.min(redis.call('ZCARD', k_completed) - keep_count - #old, TRIM - #old)
  if over > 0 then
    for _, id in ipairs(redis.call('ZRANGE', k_completed, #old, #old + over - 1)) do
      old[#old + 1] = id
    end
  end
  if #old == 0 then return end
  for _, id in ipairs(old) do
    local row = prefix .. 'job:' .. id
    local g = redis.call('HMGET', row, 'state', 'result_until')
    if g[1] == 'completed' then
      if g[2] and tonumber(g[2]) > now then
        redis.call('PEXPIREAT', row, g[2])
      else
        redis.call('DEL', row)
      end
    end
  end
  redis.call('ZREM', k_completed, unpack(old))
end

local ids, rows = {}, {}  -- completed: removed from active and deleted together, at the end
local seen = {}  -- a job named twice in one call completes once (the second is gone)
local step = keep == '1' and 4 or 2
-- every lease deadline in one read (nothing below moves a score in active)
local given = {}
for i = 6, #ARGV, step do given[#given + 1] = ARGV[i] end
local scores = {}
if #given > 0 then scores = redis.call('ZMSCORE', k_active, unpack(given)) end
for n, id in ipairs(given) do
  local i = 6 + (n - 1) * step
  local token = ARGV[i + 1]
  local row = prefix .. 'job:' .. id
  if seen[id] then
    out[#out + 1] = ANSWER.gone
  else
    local score = scores[n]
    local f = redis.call('HMGET', row, 'token', 'attempts', 'dedup', 'lane', 'waiters',
      'parent', 'children_left', 'state')
    if not f[8] and no_job(prefix, id) then
      out[#out + 1] = ANSWER.gone
    elseif score and tonumber(score) > now and f[1] == token then
      seen[id] = true
      ids[#ids + 1] = id
      local result = ''
      if step == 2 then
        rows[#rows + 1] = row
      else
        result = keep_row(row, id, ARGV[i + 2], tonumber(ARGV[i + 3]))
      end
      if f[5] then tell_waiters(prefix, id, f[5], 'completed', result) end
      if f[6] then  -- a child of a flow: its parent's bookkeeping, in this same step
        local given = ''
        if step == 4 then given = ARGV[i + 2] end
        flow_child_done(prefix, prefix .. 'pending', f[6], id, 'completed', given, '', now)
      end
      if f[7] then  -- a flow's parent: its children's record goes with it
        redis.call('DEL', prefix .. 'flow:' .. id, prefix .. 'flow:' .. id .. ':results')
      end
      lane_release(f[4], id)
      if f[3] and redis.call('GET', prefix .. 'de:' .. f[3]) == id then
        redis.call('DEL', prefix .. 'de:' .. f[3])
      end
      out[#out + 1] = ANSWER.completed
      emit('event', 'completed', 'job', id, 'attempts', f[2] or '0')
    else
      out[#out + 1] = ANSWER.lost
      emit('event', 'lease_lost', 'job', id, 'token', token, 'via', 'complete')
    end
  end
end
if #ids > 0 then
  redis.call('ZREM', k_active, unpack(ids))
  if #rows > 0 then redis.call('DEL', unpack(rows)) end
  redis.call('HINCRBY', k_metrics, 'completed', #ids)
end
if #kept > 0 then
  redis.call('ZADD', k_completed, unpack(kept))
  trim_kept()
end
return finish(out)
