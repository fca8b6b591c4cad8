-- resume: queue paused -> queue running
--
-- Clears the pause flag and wakes parked workers.
--
-- KEYS[1] meta       HASH    queue flags (paused)
-- KEYS[2] events     STREAM  lifecycle events
-- KEYS[3] wake       LIST    wake-up tokens for parked workers
-- ARGV[1] maxlen     integer event stream cap (~); 0 = no events; -1 = never trim
-- Returns: 1 if the queue was paused, 0 if it was running
-- Errors: none
-- Derives: events:archived STRING (read only)
local k_meta = KEYS[1]
local k_events = KEYS[2]
local k_wake = KEYS[3]
local maxlen = tonumber(ARGV[1])

use_events(k_events, maxlen)

local changed = redis.call('HDEL', k_meta, 'paused')
emit('event', 'resumed')
wake(k_wake, 32)  -- every parked worker
return finish(changed)
