-- promote_job: schedule -> pending (one job, now)
--
-- Moves one scheduled job (a delayed enqueue, a retry in backoff, a rescheduled job) to its
-- lane's waiting set now, as if its run-at time had come: the lane joins the ring and a
-- parked worker is woken. A job that is already pending is left where it is (0). Safety
-- belt: the row's state and its set must agree (includes/rows.lua waiting_job), so an
-- active, dead, completed or missing job is refused and nothing is written; the ZREM and
-- the ZADD are in this one step.
--
-- KEYS[1] schedule   ZSET    delayed jobs, score = run-at ms
-- KEYS[2] pending    ZSET    waiting jobs of the default lane, score = priority
-- KEYS[3] events     STREAM  lifecycle events
-- KEYS[4] wake       LIST    wake-up tokens for parked workers
-- KEYS[5] meta       HASH    queue flags (lanes, vtime, lifo_seq)
-- ARGV[1] prefix     string  the queue's key prefix, emq:{<queue>}:
-- ARGV[2] maxlen     integer event stream cap (~); 0 = no events; -1 = never trim
-- ARGV[3] id         string  the job to promote
-- Returns: 1 promoted (a 'promoted' event) | 0 it was pending already (nothing written)
-- Errors: EMQNOJOB <id> when no row exists; EMQNOTWAITING <id> is <state> when the job is
--         not pending or scheduled
-- Derives: job:<id> HASH, packed HASH (layout 3: includes/packed.lua), lane:<L>:pending ZSET, lanes:ring ZSET, lane:default:active SET
--   (when lane mode turns on), events:archived STRING (read only)
-- Includes: events, lanes, rows, wake
local k_schedule = KEYS[1]
local k_pending = KEYS[2]
local k_events = KEYS[3]
local k_wake = KEYS[4]
local k_meta = KEYS[5]
local prefix = ARGV[1]
local maxlen = tonumber(ARGV[2])
local id = ARGV[3]

use_events(k_events, maxlen)
use_lanes(prefix, k_meta)

local where, lane, f = waiting_job(k_pending, k_schedule, id, 'priority', 'lifo')
if not where then return lane end  -- lane holds the error reply
if where == 'pending' then return 0 end
redis.call('ZREM', k_schedule, id)
to_pending(k_pending, id, f[1], lane, f[2])
redis.call('HSET', prefix .. 'job:' .. id, 'state', 'pending')
emit('event', 'promoted', 'job', id)
wake(k_wake, 1)
return finish(1)
