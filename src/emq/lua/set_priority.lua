-- set_priority: pending | schedule -> (the same) (one job's priority)
--
-- Sets a waiting job's priority (lower runs first). The row's priority always changes; a
-- pending job is re-scored in its lane's waiting set at once (it goes behind the FIFO jobs
-- already waiting at its new priority, or, if it is a lifo job, ahead of them with a fresh
-- lifo number); a scheduled job keeps its run-at time and enters pending at the new priority
-- when due. The same priority again changes nothing in the set (the job keeps its place).
-- Safety belt: the row's state and its set must agree (includes/rows.lua waiting_job), so
-- an active, dead, completed or missing job is refused and nothing is written.
--
-- KEYS[1] pending    ZSET    waiting jobs of the default lane, score = priority
-- KEYS[2] schedule   ZSET    delayed jobs, score = run-at ms
-- KEYS[3] events     STREAM  lifecycle events
-- KEYS[4] meta       HASH    queue flags (lanes, vtime, lifo_seq)
-- ARGV[1] prefix     string  the queue's key prefix, emq:{<queue>}:
-- ARGV[2] maxlen     integer event stream cap (~); 0 = no events; -1 = never trim
-- ARGV[3] id         string  the job to change
-- ARGV[4] priority   integer the new priority, -2^31..2^31-1
-- Returns: 'pending' | 'scheduled': where the job is (a 'reprioritised' event)
-- Errors: EMQNOJOB <id> when no row exists; EMQNOTWAITING <id> is <state> when the job is
--         not pending or scheduled
-- Derives: job:<id> HASH, packed HASH (layout 3: includes/packed.lua), lane:<L>:pending ZSET, lanes:ring ZSET, events:archived STRING
--   (read only)
-- Includes: answers, events, lanes, rows
local k_pending = KEYS[1]
local k_schedule = KEYS[2]
local k_events = KEYS[3]
local k_meta = KEYS[4]
local prefix = ARGV[1]
local maxlen = tonumber(ARGV[2])
local id = ARGV[3]
local priority = ARGV[4]

use_events(k_events, maxlen)
use_lanes(prefix, k_meta)

local where, lane, f = waiting_job(k_pending, k_schedule, id, 'priority', 'lifo')
if not where then return lane end  -- lane holds the error reply
redis.call('HSET', prefix .. 'job:' .. id, 'priority', priority)
if where == 'pending' and tonumber(f[1]) ~= tonumber(priority) then
  to_pending(k_pending, id, priority, lane, f[2])  -- ZADD re-scores it in its own set
end
emit('event', 'reprioritised', 'job', id, 'priority', priority)
if where == 'pending' then return finish(ANSWER.pending) end
return finish(ANSWER.scheduled)
