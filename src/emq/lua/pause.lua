-- pause: queue running -> queue paused
--
-- Sets the pause flag that claim reads inside its own step, so no claim that starts after
-- this call returns can lease a job. Jobs already leased keep running.
--
-- KEYS[1] meta       HASH    queue flags (paused)
-- KEYS[2] events     STREAM  lifecycle events
-- ARGV[1] maxlen     integer event stream cap (~); 0 = no events; -1 = never trim
-- Returns: 1 if the queue was running, 0 if it was already paused
-- Errors: none
-- Derives: events:archived STRING (read only)
local k_meta = KEYS[1]
local k_events = KEYS[2]
local maxlen = tonumber(ARGV[1])

use_events(k_events, maxlen)

local changed = 1
if redis.call('HGET', k_meta, 'paused') == '1' then changed = 0 end
redis.call('HSET', k_meta, 'paused', '1')
emit('event', 'paused')
return finish(changed)
