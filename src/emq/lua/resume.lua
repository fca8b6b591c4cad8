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

-- events: appended by the emit function, trimmed once per call by finish (approximate MAXLEN),
-- unless an archiver owns retention (events:archived exists)
local trim = maxlen > 0 and redis.call('EXISTS', k_events .. ':archived') == 0
local emitted = false
local function emit(...)
  if maxlen ~= 0 then
    redis.call('XADD', k_events, '*', ...)
    emitted = true
  end
end
local function finish(reply)
  if emitted and trim then redis.call('XTRIM', k_events, 'MAXLEN', '~', maxlen) end
  return reply
end

local changed = redis.call('HDEL', k_meta, 'paused')
emit('event', 'resumed')
redis.call('LPUSH', k_wake, '1')
redis.call('LTRIM', k_wake, 0, 31)
return finish(changed)
