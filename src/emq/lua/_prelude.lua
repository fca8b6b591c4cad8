-- _prelude: shared by every script (not a transition). The loader runs each script as
-- '#!lua' + the script's header + this prelude + the script's body, so the sha, the header
-- test and the server all see the same text. The '#!lua' line (no flags) makes the server
-- refuse a script whole, before its first command, while it is out of memory: no script
-- can stop half-way through its writes with an OOM error.
--
-- server_ms()           the server clock (TIME), integer ms
-- server_us()           the server clock (TIME), integer microseconds (exact below 2^53)
-- use_events(key, max)  where emit() appends and how finish() trims: max 0 = no events,
--                       -1 = never trim, > 0 = approximate MAXLEN, unless an archiver owns
--                       retention (<events>:archived exists, section 7 of the spec)
-- emit(...)             one XADD of field/value pairs
-- finish(reply)         trims once per call if anything was emitted; returns reply
-- wake(k_wake, n)       pushes min(n, 32) wake tokens for parked workers, list capped at 32
-- ANSWER                the closed set of per-job answers, decoded in emq.calls.Answer
local ANSWER = {completed = 'completed', lost = 'lost', gone = 'gone', pending = 'pending',
  scheduled = 'scheduled', dead = 'dead', missing = 'missing'}

local function server_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function server_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

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
  if ev_emitted and ev_max > 0 and redis.call('EXISTS', ev_key .. ':archived') == 0 then
    redis.call('XTRIM', ev_key, 'MAXLEN', '~', ev_max)
  end
  return reply
end

local function wake(k_wake, n)
  if n > 0 then
    local tokens = {}
    for i = 1, math.min(n, 32) do tokens[i] = '1' end
    redis.call('LPUSH', k_wake, unpack(tokens))
    redis.call('LTRIM', k_wake, 0, 31)
  end
end
