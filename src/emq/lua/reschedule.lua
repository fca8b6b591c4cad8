-- reschedule: pending | schedule -> schedule | pending (one job)
--
-- Sets when a waiting job may run: delay_ms > 0 puts it into schedule at server now +
-- delay_ms (a pending job leaves its lane's waiting set; a scheduled one gets the new run-at
-- time, earlier or later); delay_ms = 0 makes it pending now (a scheduled job joins its
-- lane's waiting set and wakes a worker, as promote_job; a pending job keeps its place).
-- Safety belt: the row's state and its set must agree (includes/rows.lua waiting_job), so
-- an active, dead, completed or missing job is refused and nothing is written.
--
-- KEYS[1] pending    ZSET    waiting jobs of the default lane, score = priority
-- KEYS[2] schedule   ZSET    delayed jobs, score = run-at ms
-- KEYS[3] events     STREAM  lifecycle events
-- KEYS[4] wake       LIST    wake-up tokens for parked workers
-- KEYS[5] meta       HASH    queue flags (lanes, vtime, lifo_seq)
-- ARGV[1] prefix     string  the queue's key prefix, emq:{<queue>}:
-- ARGV[2] maxlen     integer event stream cap (~); 0 = no events; -1 = never trim
-- ARGV[3] id         string  the job to reschedule
-- ARGV[4] delay_ms   integer from server now, ms; 0 = pending now
-- Returns: 'pending' | 'scheduled': where the job is now (a 'rescheduled' event)
-- Errors: EMQNOJOB <id> when no row exists; EMQNOTWAITING <id> is <state> when the job is
--         not pending or scheduled
-- Derives: job:<id> HASH, packed HASH (layout 3: includes/packed.lua), lane:<L>:pending ZSET, lanes:ring ZSET, lane:default:active SET
--   (when lane mode turns on), events:archived STRING (read only)
-- Includes: answers, clock, events, lanes, rows, wake
local k_pending = KEYS[1]
local k_schedule = KEYS[2]
local k_events = KEYS[3]
local k_wake = KEYS[4]
local k_meta = KEYS[5]
local prefix = ARGV[1]
local maxlen = tonumber(ARGV[2])
local id = ARGV[3]
local delay_ms = tonumber(ARGV[4])

use_events(k_events, maxlen)
use_lanes(prefix, k_meta)

local where, lane, f = waiting_job(k_pending, k_schedule, id, 'priority', 'lifo')
if not where then return lane end  -- lane holds the error reply
local row = prefix .. 'job:' .. id
local state = ANSWER.pending
if delay_ms > 0 then
  state = ANSWER.scheduled
  if where == 'pending' then
    redis.call('ZREM', lane_pending_key(k_pending, lane), id)
    redis.call('HSET', row, 'state', 'scheduled')
  end
  redis.call('ZADD', k_schedule, server_ms() + delay_ms, id)
elseif where == 'schedule' then
  redis.call('ZREM', k_schedule, id)
  to_pending(k_pending, id, f[1], lane, f[2])
  redis.call('HSET', row, 'state', 'pending')
  wake(k_wake, 1)
end
emit('event', 'rescheduled', 'job', id, 'delay_ms', delay_ms, 'state', state)
return finish(state)
