-- cancel: pending | schedule | waiting -> dead (cancelled); active -> active (cancel requested)
--
-- Cancels one job, by what it is doing at this instant (docs/control.md, Cancellation):
-- waiting (any lane) or scheduled: it leaves its set and joins dead in this same step, so no
-- claim can ever lease it (row: state dead, cancelled = reason, last_error 'cancelled' or
-- 'cancelled: <reason>', died_at; event cancelled; result() waiters told 'cancelled');
-- leased: the row gets cancel = reason and the job stays active: its worker learns on its
-- next heartbeat (extend answers 'cancelled') and fails it, and fail, delay and the sweep
-- turn a job with cancel into a cancelled dead job, never a retry or a recovery. Safety belt:
-- the job is found by its location sets (its own lane's waiting set), never by the row's
-- state alone, and leaves exactly one set for exactly one; nothing else is touched.
--
-- KEYS[1] pending    ZSET    waiting jobs of the default lane
-- KEYS[2] active     ZSET    leased jobs, score = lease deadline ms
-- KEYS[3] schedule   ZSET    delayed jobs, score = run-at ms
-- KEYS[4] dead       ZSET    dead jobs, score = ms of death
-- KEYS[5] metrics    HASH    counters (cancelled)
-- KEYS[6] events     STREAM  lifecycle events
-- KEYS[7] meta       HASH    queue flags (lanes, vtime)
-- ARGV[1] prefix     string  the queue's key prefix, emq:{<queue>}:
-- ARGV[2] maxlen     integer event stream cap (~); 0 = no events; -1 = never trim
-- ARGV[3] id         string  the job to cancel
-- ARGV[4] reason     string  the caller's reason, may be '' (at most 1,000 characters)
-- Returns: 'cancelled' (it was waiting or scheduled: now dead, cancelled; or it already was
--   a cancelled dead job) | 'requested' (it is leased: its worker is told; a second cancel
--   keeps the first reason) | 'dead' (already dead, not by a cancel: unchanged) |
--   'completed' (a completed row kept by results or retention: unchanged)
-- Errors: EMQNOJOB <id> ... when the job has no row; EMQSTATE when its row is in no location
-- A flow's waiting parent (docs/flows.md) leaves waiting the same way, and its unfinished
-- children are cancelled with it in this same step (a leased one gets its cancel request);
-- a cancelled child of a flow is counted for its parent (includes/flows.lua flow_child_done).
-- Derives: packed HASH (a packed job is unpacked first: includes/packed.lua),
--   job:<id> HASH, done:<id> LIST, lane:<L>:pending ZSET, events:archived STRING
--   (read only), waiting ZSET, flow:<id> HASH, flow:<id>:results HASH, wake LIST
-- Includes: answers, cancel, clock, events, lanes, packed
local k_pending = KEYS[1]
local k_active = KEYS[2]
local k_schedule = KEYS[3]
local k_dead = KEYS[4]
local k_metrics = KEYS[5]
local k_events = KEYS[6]
local k_meta = KEYS[7]
local prefix = ARGV[1]
local maxlen = tonumber(ARGV[2])
local id = ARGV[3]
local reason = ARGV[4]

use_events(k_events, maxlen)
use_lanes(prefix, k_meta)
unpack_job(prefix, id)  -- a packed waiting job (layout 3) gets its row first

local now = server_ms()

local row = prefix .. 'job:' .. id
local f = redis.call('HMGET', row, 'state', 'lane', 'attempts', 'waiters', 'cancel',
  'cancelled', 'parent', 'on_failure')
if not f[1] then
  return redis.error_reply('EMQNOJOB job ' .. id .. ' does not exist: never enqueued here, '
    .. 'removed, or completed (a completed row is kept only with results or retention)')
end
if cancel_waiting(prefix, k_pending, k_schedule, k_active, k_dead, k_metrics, id, f,
    reason, now) then return finish(ANSWER.cancelled) end
if redis.call('ZSCORE', k_active, id) then
  if not f[5] then
    redis.call('HSET', row, 'cancel', reason)
    emit('event', 'cancel_requested', 'job', id, 'reason', reason, 'attempts', f[3] or '0')
  end
  return finish('requested')
end
if redis.call('ZSCORE', k_dead, id) then
  if f[6] then return finish(ANSWER.cancelled) end
  return finish(ANSWER.dead)
end
if f[1] == 'completed' then return finish(ANSWER.completed) end
return redis.error_reply('EMQSTATE job ' .. id .. ' is ' .. f[1] .. ' but in no location set')
