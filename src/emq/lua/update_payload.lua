-- update_payload: pending | schedule -> (the same) (one job's payload)
--
-- Replaces a waiting job's payload (JSON text, checked by the caller as an enqueue's is):
-- the next claim of the job hands out the new one. The job keeps its place, priority and
-- run-at time. An enqueue re-sent later with the job's id and its old payload is then a
-- conflict (EMQCONFLICT), as for any id reused with another payload. Safety belt: the row's
-- state and its set must agree (includes/rows.lua waiting_job), so an active job (whose
-- worker holds the old payload), a dead, completed or missing one is refused and nothing is
-- written.
--
-- KEYS[1] pending    ZSET    waiting jobs of the default lane, score = priority
-- KEYS[2] schedule   ZSET    delayed jobs, score = run-at ms
-- KEYS[3] events     STREAM  lifecycle events
-- KEYS[4] meta       HASH    queue flags (lanes)
-- ARGV[1] prefix     string  the queue's key prefix, emq:{<queue>}:
-- ARGV[2] maxlen     integer event stream cap (~); 0 = no events; -1 = never trim
-- ARGV[3] id         string  the job to change
-- ARGV[4] payload    string  the new payload, JSON text
-- Returns: 'pending' | 'scheduled': where the job is (a 'payload_updated' event)
-- Errors: EMQNOJOB <id> when no row exists; EMQNOTWAITING <id> is <state> when the job is
--         not pending or scheduled
-- Derives: job:<id> HASH, packed HASH (layout 3: includes/packed.lua), lane:<L>:pending ZSET (read only), events:archived STRING
--   (read only)
-- Includes: answers, events, lanes, rows
local k_pending = KEYS[1]
local k_schedule = KEYS[2]
local k_events = KEYS[3]
local k_meta = KEYS[4]
local prefix = ARGV[1]
local maxlen = tonumber(ARGV[2])
local id = ARGV[3]
local payload = ARGV[4]

use_events(k_events, maxlen)
use_lanes(prefix, k_meta)

local where, lane = waiting_job(k_pending, k_schedule, id)
if not where then return lane end  -- lane holds the error reply
redis.call('HSET', prefix .. 'job:' .. id, 'payload', payload)
emit('event', 'payload_updated', 'job', id)
if where == 'pending' then return finish(ANSWER.pending) end
return finish(ANSWER.scheduled)
