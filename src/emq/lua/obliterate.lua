-- obliterate: every location -> (queue deleted)
--
-- Deletes a queue in bounded chunks: up to limit jobs per call across all location sets
-- (every lane's waiting set, the kept completed jobs and the logs index included; each
-- job's done:<id> and logs:<id> lists with it); the call that finds them all empty also deletes
-- events (with the archive's watermark and lease), meta (limits, lane mode), metrics,
-- stalled-check, wake, the claim logs and every lane's keys. Refuses while jobs are leased unless force = 1. Safety belt: every id leaves its set
-- with its row and dedup key; the caller repeats until done = 1.
-- Flows (docs/flows.md): a child whose parent is in another queue is counted for it as
-- 'removed' through this queue's outbox (a parent in this queue goes with it, uncounted);
-- so the outbox goes last: while it holds entries the call returns done = 0 and deletes
-- nothing more, and the caller delivers them (deliver_outbox) before calling again.
-- At maxmemory (allow-oom): runs after the server refused the plain call for memory; it
--   appends no event in any case, and an outbox entry is a few bytes next to the row it
--   deletes.
--
-- KEYS[1] pending        ZSET    waiting jobs
-- KEYS[2] active         ZSET    leased jobs
-- KEYS[3] schedule       ZSET    delayed jobs
-- KEYS[4] dead           ZSET    dead jobs
-- KEYS[5] events         STREAM  lifecycle events
-- KEYS[6] meta           HASH    queue flags
-- KEYS[7] metrics        HASH    counters
-- KEYS[8] stalled-check  STRING  the sweep guard
-- KEYS[9] wake           LIST    wake-up tokens
-- KEYS[10] completed     ZSET    kept completed jobs
-- ARGV[1] prefix         string  the queue's key prefix, emq:{<queue>}:
-- ARGV[2] limit          integer most jobs to delete in this call, 1..10000
-- ARGV[3] force          integer 1 = delete leased jobs too
-- Returns: {deleted jobs in this call, 1 when the queue is gone | 0 when more remain (jobs,
--   or outbox entries to deliver first)}
-- Errors: EMQSTATE when jobs are leased and force = 0
-- Derives: job:<id> HASH, de:<dedup> STRING, done:<id> LIST, events:archived STRING, events:archiver STRING and events:count STRING
--   (deleted with the queue, so a reused name starts with trimming scripts and no archiver),
--   rate ZSET, lanes:ring ZSET, lanes:later ZSET, lanes:full SET, lanes:conf HASH,
--   lane:<L>:pending ZSET, lane:<L>:active SET, lane:<L>:rate ZSET,
--   repeats ZSET, repeat-slots HASH, repeat:<key> HASH (every repeating schedule),
--   waiting ZSET, flow:<id> HASH, flow:<id>:results HASH, outbox HASH (flows: its
--   messages are delivered before it goes), settings HASH (the queue's stored settings),
--   logs ZSET, logs:<id> LIST (every job's log lines, by the logs index)
-- Flags: allow-oom
-- Includes: clock, flows, lanes, packed
local k_pending = KEYS[1]
local k_active = KEYS[2]
local k_schedule = KEYS[3]
local k_dead = KEYS[4]
local k_events = KEYS[5]
local k_meta = KEYS[6]
local k_metrics = KEYS[7]
local k_stalled_check = KEYS[8]
local k_wake = KEYS[9]
local k_completed = KEYS[10]
local prefix = ARGV[1]
local limit = tonumber(ARGV[2])
local force = ARGV[3]

use_lanes(prefix, k_meta)

if force ~= '1' and redis.call('ZCARD', k_active) > 0 then
  return redis.error_reply('EMQSTATE queue has leased jobs; stop its workers or use force')
end
local now = server_ms()
local removed = drop_packed(prefix, limit)  -- packed jobs (layout 3) first
local sets = {k_pending, k_active, k_schedule, k_dead, k_completed, prefix .. 'waiting'}
local lanes = {}
if lane_mode then
  lanes = known_lanes()
  for i = 2, #lanes do sets[#sets + 1] = lane_pending_key(k_pending, lanes[i]) end
end
sets[#sets + 1] = prefix .. 'logs'  -- last: the ids whose only key left is their log
for _, set in ipairs(sets) do
  if removed < limit then
    local ids = redis.call('ZRANGE', set, 0, limit - removed - 1)
    for _, id in ipairs(ids) do
      local row = prefix .. 'job:' .. id
      local f = redis.call('HMGET', row, 'dedup', 'lane', 'parent', 'on_failure', 'state')
      if f[1] and redis.call('GET', prefix .. 'de:' .. f[1]) == id then
        redis.call('DEL', prefix .. 'de:' .. f[1])
      end
      if set == k_active and lane_mode then
        redis.call('SREM', lane_key(lane_of(f[2]), 'active'), id)
      end
      redis.call('DEL', row, prefix .. 'done:' .. id, prefix .. 'flow:' .. id,
        prefix .. 'flow:' .. id .. ':results', prefix .. 'logs:' .. id)
      redis.call('ZREM', set, id)
      if f[3] and f[5] ~= 'completed' and string.find(f[3], '@', 1, true) then
        flow_child_done(prefix, k_pending, f[3], id, 'removed', '', f[4], now)
      end
    end
    removed = removed + #ids
  end
end
local left = 0
for _, set in ipairs(sets) do
  left = left + redis.call('ZCARD', set)
end
left = left + redis.call('HLEN', prefix .. 'packed')
if left > 0 or redis.call('HLEN', prefix .. 'outbox') > 0 then return {removed, 0} end
for _, lane in ipairs(lanes) do
  redis.call('DEL', lane_key(lane, 'active'), lane_key(lane, 'rate'))
end
local schedules = redis.call('ZRANGE', prefix .. 'repeats', 0, -1)  -- at most 4,096
for i = 1, #schedules do schedules[i] = prefix .. 'repeat:' .. schedules[i] end
for i = 1, #schedules, 1000 do
  redis.call('DEL', unpack(schedules, i, math.min(i + 999, #schedules)))
end
redis.call('DEL', prefix .. 'repeats', prefix .. 'repeat-slots', prefix .. 'settings')
redis.call('DEL', k_events, k_meta, k_metrics, k_stalled_check, k_wake,
  k_events .. ':archived', k_events .. ':archiver', k_events .. ':count', prefix .. 'rate', prefix .. 'lanes:ring',
  prefix .. 'lanes:later', prefix .. 'lanes:full', prefix .. 'lanes:conf', prefix .. 'outbox')
return {removed, 1}
