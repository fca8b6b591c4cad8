-- events: the lifecycle event stream (docs/events.md), appended to and trimmed once per call
-- Includes: lanes, layout
--
-- use_events(key, max)  where emit() appends and how finish() trims: max 0 = no events,
--                       -1 = never trim, > 0 = about max job events kept, unless an archiver
--                       owns retention (<events>:archived exists, section 7 of the spec)
-- emit(...)             one event: field/value pairs, 'event', <name> first, then 'job', <id>
--                       for a job's event. Layout 1: one XADD each. Layout 2: gathered, and
--                       written by finish as one entry per call
-- finish(reply)         writes what the lane helpers gathered (lanes_flush), then (layout 2)
--                       the call's events as one entry: the event's own fields when there is
--                       one, else 'n' (the count) and 'e': per event its name, then its
--                       field, value pairs ('job' first), joined by the unit separator \31,
--                       the events joined by the record separator \30 (no value holds
--                       either: free text is cleaned of them before it is sent,
--                       emq.model.events), with the stream's last id moved on to
--                       id + n - 1 (XSETID) so event i has the position <ms>-<seq + i - 1>
--                       and the next entry starts above them all; then trims once per call;
--                       returns reply
-- hold_events(on)       a script that runs others (-- Runs:) holds their events while on:
--                       finish() then writes the lanes' gathered state but not the events,
--                       so the parts' events go out in one entry, by the last finish()
local ev_key, ev_max, ev_emitted, ev_batch, ev_held = '', 0, false, {}, false
local function hold_events(on)
  ev_held = on
end
local function use_events(k_events, maxlen)
  ev_key, ev_max = k_events, maxlen
end

local function emit(...)
  if ev_max ~= 0 then
    if queue_layout >= 2 then
      ev_batch[#ev_batch + 1] = {...}
    else
      redis.call('XADD', ev_key, '*', ...)
    end
    ev_emitted = true
  end
end

local function ev_append()  -- layout 2: the call's events as one entry; returns their count
  local n = #ev_batch
  if n == 1 then
    redis.call('XADD', ev_key, '*', unpack(ev_batch[1]))
  elseif n > 1 then
    local packed = {}
    for i, e in ipairs(ev_batch) do  -- e: 'event', name, then field, value, ... ('job' first)
      packed[i] = table.concat(e, '\31', 2)
    end
    local id = redis.call('XADD', ev_key, '*', 'n', n, 'e', table.concat(packed, '\30'))
    local ms, seq = string.match(id, '^(%d+)-(%d+)$')
    redis.call('XSETID', ev_key, ms .. '-' .. string.format('%.0f', tonumber(seq) + n - 1))
  end
  ev_batch, ev_emitted = {}, false
  return n
end

local function ev_trim(n)  -- trims once per call: entries (layout 1) or about job events (2)
  if ev_max <= 0 then return end
  local k_count = ev_key .. ':count'
  if redis.call('EXISTS', ev_key .. ':archived') == 1 then
    if n > 0 then redis.call('DEL', k_count) end  -- the archiver owns retention: no count
    return
  end
  if n == 0 then
    redis.call('XTRIM', ev_key, 'MAXLEN', '~', ev_max)
    return
  end
  local c = redis.call('INCRBY', k_count, n)
  if c == n then  -- no count yet (an upgrade, an archiver gone): one event per older entry
    c = redis.call('INCRBY', k_count, redis.call('XLEN', ev_key) - 1)
  end
  if c > ev_max + math.max(100, math.floor(ev_max / 10)) then
    local entries = redis.call('XLEN', ev_key)
    local keep = math.max(1, math.floor(entries * ev_max / c))
    local cut = redis.call('XTRIM', ev_key, 'MAXLEN', '~', keep)
    if cut > 0 then
      redis.call('INCRBY', k_count, -math.min(c, math.floor(cut * c / entries + 0.5)))
    end
  end
end

local function finish(reply)
  lanes_flush()
  if ev_emitted and not ev_held then
    ev_trim(ev_append())
  end
  return reply
end
