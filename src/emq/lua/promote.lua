-- promote: schedule -> pending (due jobs)
--
-- Moves jobs whose run-at time has come (score <= now, server clock) to pending, at most limit
-- per call (includes/due.lua promote_due, which claim also runs before it pops); this script
-- serves the maintenance beat so that due jobs wake parked workers. Safety belt: ZREM and ZADD
-- are in this one step; each job goes to its own lane.
--
-- KEYS[1] schedule   ZSET    delayed jobs, score = run-at ms
-- KEYS[2] pending    ZSET    waiting jobs, score = priority
-- KEYS[3] events     STREAM  lifecycle events
-- KEYS[4] wake       LIST    wake-up tokens for parked workers
-- KEYS[5] metrics    HASH    counters (missing)
-- KEYS[6] meta       HASH    queue flags (lanes, vtime)
-- ARGV[1] prefix     string  the queue's key prefix, emq:{<queue>}:
-- ARGV[2] maxlen     integer event stream cap (~); 0 = no events; -1 = never trim
-- ARGV[3] limit      integer most jobs to move, 1..10000
-- Returns: array of the promoted ids (an id found without its row is dropped from schedule,
--          counted in metrics 'missing' and a 'missing' event appended)
-- Errors: none
-- Derives: job:<id> HASH, lane:<L>:pending ZSET, lanes:ring ZSET, events:archived STRING
--   (read only)
-- Includes: clock, due, events, lanes, wake
local k_schedule = KEYS[1]
local k_pending = KEYS[2]
local k_events = KEYS[3]
local k_wake = KEYS[4]
local k_metrics = KEYS[5]
local k_meta = KEYS[6]
local prefix = ARGV[1]
local maxlen = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])

use_events(k_events, maxlen)
use_lanes(prefix, k_meta)

local now = server_ms()
local out, missing = {}, {}
promote_due(prefix, k_schedule, k_pending, now, limit, out, missing)
if #missing > 0 then redis.call('HINCRBY', k_metrics, 'missing', #missing) end
if #out > 0 then
  wake(k_wake, #out)
end
return finish(out)
