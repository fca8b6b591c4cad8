-- events: the lifecycle event stream (docs/events.md), appended to and trimmed once per call
-- Includes: lanes
--
-- use_events(key, max)  where emit() appends and how finish() trims: max 0 = no events,
--                       -1 = never trim, > 0 = approximate MAXLEN, unless an archiver owns
--                       retention (<events>:archived exists, section 7 of the spec)
-- emit(...)             one XADD of field/value pairs
-- finish(reply)         writes what the lane helpers gathered (lanes_flush), then trims
--                       once per call if anything was emitted; returns reply
local ev_key, ev_max, ev_emitted = '', 0, false
local function use_events(k_events, maxlen)
  ev_key, ev_max = k_events, maxlen
end

local function emit(...)
  if ev_max ~= 0 then
    redis.call('XADD', ev_key, '*', ...)
    ev_emitted = true
  end
end

local function finish(reply)
  lanes_flush()
  if ev_emitted and ev_max > 0 and redis.call('EXISTS', ev_key .. ':archived') == 0 then
    redis.call('XTRIM', ev_key, 'MAXLEN', '~', ev_max)
  end
  return reply
end
