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
-- use_lanes(prefix, k_meta, ...)  reads the queue's lane mode (docs/lanes.md) and returns
--                       meta's concurrency and the other fields named, in order
-- lanes_on(k_pending)   turns lane mode on: today's leased jobs join the default lane's
--                       active set, and the default lane joins the ring if it has work
-- to_pending(k_pending, id, priority, lane, lifo)  puts a job into its lane's waiting set
--                       (and its lane into the ring, at finish); lane is the row's field or
--                       false; lifo is the row's 'lifo' field: '1' gives it a fresh lifo score
-- lifo_seq(n)           takes n numbers of the queue's lifo counter (meta lifo_seq, one
--                       HINCRBY) and returns the first
-- lifo_score(priority, seq)  a lifo job's score: priority - seq / 2^41 (seq capped at
--                       2^40 - 1), ahead of the FIFO jobs of its priority (score = priority),
--                       the newest lifo job first, never past the next priority; written
--                       with '%.17g' so the server parses back the exact double
-- waiting_job(k_pending, k_schedule, id, ...)  the safety belt of an edit of a waiting job:
--                       reads the row's state, lane and the fields named; returns where
--                       ('pending' | 'schedule', its id really in that set), the lane's name
--                       and the fields (a table), or false and the error reply to return
--                       (EMQNOJOB; EMQNOTWAITING naming the state)
-- lane_of(field)       a row's lane field (false or '' for the default lane) -> lane name
-- lane_key(lane, what)  a key of one lane: lane:<L>:pending | active | rate
-- lane_release(lane, id)  a leased job of lane leaves active: its slot is freed (one SREM
--                       per lane, in lanes_flush, in this same step)
-- lanes_flush()         writes what to_pending and lane_release gathered (finish calls it)
-- known_lanes()         every lane that may hold waiting jobs (ring, later, full, conf),
--                       the default lane first
-- tell_waiters(prefix, id, n, outcome, value)  a job ended while n result() callers wait
--                       on it (its row's 'waiters' field, read by the caller): pushes n
--                       copies (at most 1,000) of outcome .. '\n' .. value onto done:<id>
--                       (a LIST kept 60 s); outcome is completed | dead | cancelled
-- to_cancelled(prefix, k_dead, k_metrics, id, reason, from, attempts, waiters, now)
--                       a job with a cancel ends (cancel, or fail / delay / sweep of a job
--                       whose row has 'cancel'): the caller has taken it out of its set; here
--                       it joins dead with cancelled = reason, last_error 'cancelled' or
--                       'cancelled: <reason>', died_at = now, its 'cancel' field dropped;
--                       metrics cancelled + 1, a 'cancelled' event (from = where it was),
--                       result() waiters told 'cancelled'
-- flow_child_done(prefix, k_pending, parent, id, status, result, policy, now)  a child of
--                       a flow (docs/flows.md) ended: status completed | dead | cancelled |
--                       removed; counted once in flow:<parent> (a status already final is
--                       never counted again; a dead child with policy 'continue' stays
--                       unfinished); result (JSON text or '') kept in flow:<parent>:results;
--                       the waiting parent becomes pending when its children_left reaches 0,
--                       or dead when a child with policy fail_parent (the default) died (its
--                       own parent told in turn). A parent in another queue (the row's
--                       parent is '<id>@<queue>') is told through this queue's outbox: one
--                       entry per child, 'done:<id>' -> JSON {q, p, c, s, f, r}, written
--                       once (HSETNX: the first end counts, as in flow:<parent>) and
--                       delivered by deliver_flow in the parent's slot
-- flow_count(prefix, k_pending, parent, child, status, result, policy, now)  the parent's
--                       side of the above, in the parent's own slot (child is '<id>' or
--                       '<id>@<queue>'); returns false when it counted nothing
-- cancel_children(prefix, k_pending, k_schedule, k_active, k_dead, k_metrics, kids, reason,
--                       now)  a waiting parent ended: each unfinished child of kids (its
--                       flow:<id> HGETALL) is cancelled (cancel_waiting, or a cancel
--                       request when leased); a child in another queue gets an outbox entry
--                       'cancel:<id>@<queue>' -> JSON {q, j, r}, sent on as a cancel
-- cancel_waiting(prefix, k_pending, k_schedule, k_active, k_dead, k_metrics, id, f, reason,
--                       now)  a waiting, scheduled or waiting-on-children job leaves its set
--                       for dead, cancelled (to_cancelled); f is its row's HMGET of state,
--                       lane, attempts, waiters, cancel, cancelled, parent, on_failure. A
--                       flow's parent takes its unfinished children with it, in this step
--                       (a leased child gets a cancel request); a flow's child is counted
--                       for its parent. Returns where the job was, or false (in none)
-- row_fields(name, payload, state, priority, max_attempts, lane)  a new job row's fields
--                       for HSET (lane '' or false: the default lane, not stored); the
--                       caller appends its own (dedup, lifo, parent, repeat, ...). Fields at
--                       their start value are not stored (docs/keyspace.md): attempts,
--                       stalled and token are 0 until claim or the sweep writes them (read
--                       them as `or '0'`), and created_at is the id's mint time. Every row
--                       has state, name and payload: a script asks one of them whether the
--                       row exists.
-- ANSWER                the closed set of per-job answers, decoded in emq.calls.jobs.Answer
local ANSWER = {completed = 'completed', lost = 'lost', gone = 'gone', pending = 'pending',
  scheduled = 'scheduled', dead = 'dead', missing = 'missing', cancelled = 'cancelled'}

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

local function wake(k_wake, n)
  if n > 0 then
    local tokens = {}
    for i = 1, math.min(n, 32) do tokens[i] = '1' end
    redis.call('LPUSH', k_wake, unpack(tokens))
    redis.call('LTRIM', k_wake, 0, 31)
  end
end

local DEFAULT_LANE = 'default'
local lane_prefix, lane_mode, lane_vtime, queue_limited = '', false, '0', false
local lane_ready, lane_freed, released = {}, {}, 0

local function use_lanes(prefix, k_meta, ...)
  local m = redis.call('HMGET', k_meta, 'lanes', 'vtime', 'concurrency', ...)
  lane_prefix, lane_mode, lane_vtime = prefix, m[1] == '1', m[2] or '0'
  queue_limited = m[3] ~= false and m[3] ~= '0'
  return {unpack(m, 3)}
end

local function lane_of(field)  -- a row's lane field (false, '' or a name) -> the lane's name
  if not field or field == '' then return DEFAULT_LANE end
  return field
end

local function lane_key(lane, what)
  return lane_prefix .. 'lane:' .. lane .. ':' .. what
end

local function lane_pending_key(k_pending, lane)
  if lane == DEFAULT_LANE then return k_pending end
  return lane_key(lane, 'pending')
end

local function lanes_on(k_pending)
  redis.call('HSET', lane_prefix .. 'meta', 'lanes', '1')
  lane_mode = true
  local leased = redis.call('ZRANGE', lane_prefix .. 'active', 0, -1)
  for i = 1, #leased, 1000 do
    redis.call('SADD', lane_key(DEFAULT_LANE, 'active'),
      unpack(leased, i, math.min(i + 999, #leased)))
  end
  if redis.call('ZCARD', k_pending) > 0 then lane_ready[DEFAULT_LANE] = true end
end

local LIFO_STEP, LIFO_MAX = 2 ^ -41, 2 ^ 40 - 1

local function lifo_seq(n)
  return redis.call('HINCRBY', lane_prefix .. 'meta', 'lifo_seq', n) - n + 1
end

local function lifo_score(priority, seq)
  return string.format('%.17g', tonumber(priority) - math.min(seq, LIFO_MAX) * LIFO_STEP)
end

local function to_pending(k_pending, id, priority, lane, lifo)
  lane = lane_of(lane)
  if lifo == '1' then priority = lifo_score(priority, lifo_seq(1)) end
  if not lane_mode then
    if lane == DEFAULT_LANE then
      redis.call('ZADD', k_pending, priority, id)
      return
    end
    lanes_on(k_pending)
  end
  redis.call('ZADD', lane_pending_key(k_pending, lane), priority, id)
  lane_ready[lane] = true
end

local function lane_release(lane, id)
  released = released + 1
  if lane_mode then
    lane = lane_of(lane)
    local ids = lane_freed[lane]
    if not ids then
      ids = {}
      lane_freed[lane] = ids
    end
    ids[#ids + 1] = id
  end
end

local function lanes_flush()
  local names = {}
  for lane, ids in pairs(lane_freed) do
    names[#names + 1] = lane
    if ids ~= true then redis.call('SREM', lane_key(lane, 'active'), unpack(ids)) end
  end
  local k_full, k_ring = lane_prefix .. 'lanes:full', lane_prefix .. 'lanes:ring'
  local woken = 0
  if #names > 0 then
    local full = redis.call('SMISMEMBER', k_full, unpack(names))
    for i, lane in ipairs(names) do
      if full[i] == 1 then
        redis.call('SREM', k_full, lane)
        lane_ready[lane] = true
        woken = woken + 1
      end
    end
  end
  local ring = {}
  for lane in pairs(lane_ready) do
    ring[#ring + 1] = lane_vtime
    ring[#ring + 1] = lane
  end
  if #ring > 0 then redis.call('ZADD', k_ring, 'NX', unpack(ring)) end
  if queue_limited then woken = woken + released end
  wake(lane_prefix .. 'wake', woken)
  lane_ready, lane_freed, released = {}, {}, 0
end

local function tell_waiters(prefix, id, n, outcome, value)
  n = tonumber(n)
  if n and n > 0 then
    local k_done, message, items = prefix .. 'done:' .. id, outcome .. '\n' .. (value or ''), {}
    for i = 1, math.min(n, 1000) do items[i] = message end
    redis.call('LPUSH', k_done, unpack(items))
    redis.call('PEXPIRE', k_done, 60000)
  end
end

local function to_cancelled(prefix, k_dead, k_metrics, id, reason, from, attempts, waiters, now)
  local row = prefix .. 'job:' .. id
  local err = 'cancelled'
  if reason ~= '' then err = err .. ': ' .. reason end
  redis.call('HSET', row, 'state', 'dead', 'cancelled', reason, 'last_error', err,
    'died_at', now)
  redis.call('HDEL', row, 'cancel')
  redis.call('ZADD', k_dead, now, id)
  redis.call('HINCRBY', k_metrics, 'cancelled', 1)
  emit('event', 'cancelled', 'job', id, 'from', from, 'reason', reason, 'attempts',
    attempts or '0')
  tell_waiters(prefix, id, waiters, 'cancelled', err)
end

local flow_child_done, cancel_waiting

local function flow_count(prefix, k_pending, parent, id, status, result, policy, now)
  local k_flow = prefix .. 'flow:' .. parent
  if redis.call('HGET', k_flow, id) ~= '' then return false end  -- gone, or counted already
  local died = status ~= 'completed'
  if died and status ~= 'removed' and policy == 'continue' then return false end
  redis.call('HSET', k_flow, id, status)
  if result and result ~= '' then redis.call('HSET', k_flow .. ':results', id, result) end
  local prow = prefix .. 'job:' .. parent
  local left = redis.call('HINCRBY', prow, 'children_left', -1)
  local fails = died and status ~= 'removed' and policy ~= 'ignore'
  if left > 0 and not fails then return true end  -- the common case: one more child done
  if redis.call('HGET', prow, 'state') ~= 'waiting' then return true end
  if fails then
    local p = redis.call('HMGET', prow, 'waiters', 'parent', 'on_failure', 'attempts', 'name',
      'payload', 'stalled')
    local err = 'child ' .. id .. ' ' .. status
    redis.call('ZREM', prefix .. 'waiting', parent)
    redis.call('HSET', prow, 'state', 'dead', 'last_error', err, 'died_at', now)
    redis.call('ZADD', prefix .. 'dead', now, parent)
    redis.call('HINCRBY', prefix .. 'metrics', 'dead', 1)
    emit('event', 'dead', 'job', parent, 'attempts', p[4] or '0', 'error', err, 'name', p[5],
      'payload', p[6], 'stalled', p[7] or '0')
    tell_waiters(prefix, parent, p[1], 'dead', err)
    if p[2] then
      flow_child_done(prefix, k_pending, p[2], parent, 'dead', '', p[3], now)
    end
  else  -- the last child: the parent is ready
    local p = redis.call('HMGET', prow, 'priority', 'lane', 'lifo')
    redis.call('ZREM', prefix .. 'waiting', parent)
    redis.call('HSET', prow, 'state', 'pending')
    to_pending(k_pending, parent, p[1], p[2], p[3])
    wake(prefix .. 'wake', 1)
    emit('event', 'ready', 'job', parent)
  end
  return true
end

local function queue_of(prefix)  -- 'emq:{<queue>}:' -> '<queue>'
  return string.sub(prefix, 6, -3)
end

flow_child_done = function(prefix, k_pending, parent, id, status, result, policy, now)
  local at = string.find(parent, '@', 1, true)
  if not at then
    flow_count(prefix, k_pending, parent, id, status, result, policy, now)
    return
  end
  if status ~= 'completed' and status ~= 'removed' and policy == 'continue' then return end
  redis.call('HSETNX', prefix .. 'outbox', 'done:' .. id, cjson.encode({
    q = string.sub(parent, at + 1), p = string.sub(parent, 1, at - 1),
    c = id .. '@' .. queue_of(prefix), s = status, f = policy, r = result or ''}))
end

local function cancel_children(prefix, k_pending, k_schedule, k_active, k_dead, k_metrics,
    kids, reason, now)
  for i = 1, #kids, 2 do
    local kid = kids[i]
    if kids[i + 1] ~= '' then
    elseif string.find(kid, '@', 1, true) then  -- in another queue: through the outbox
      redis.call('HSET', prefix .. 'outbox', 'cancel:' .. kid, cjson.encode({
        q = string.match(kid, '@(.*)$'), j = string.match(kid, '^(.-)@'), r = reason}))
    else
      local g = redis.call('HMGET', prefix .. 'job:' .. kid, 'state', 'lane', 'attempts',
        'waiters', 'cancel', 'cancelled', 'parent', 'on_failure')
      if g[1] and not cancel_waiting(prefix, k_pending, k_schedule,
          k_active, k_dead, k_metrics, kid, g, reason, now) and redis.call('ZSCORE', k_active, kid)
          and not g[5] then
        redis.call('HSET', prefix .. 'job:' .. kid, 'cancel', reason)
        emit('event', 'cancel_requested', 'job', kid, 'reason', reason, 'attempts',
          g[3] or '0')
      end
    end
  end
end

cancel_waiting = function(prefix, k_pending, k_schedule, k_active, k_dead, k_metrics,
    job, f, reason, now)
  local from = false
  if redis.call('ZREM', lane_pending_key(k_pending, lane_of(f[2])), job) == 1 then
    from = 'pending'
  elseif redis.call('ZREM', k_schedule, job) == 1 then
    from = 'schedule'
  elseif redis.call('ZREM', prefix .. 'waiting', job) == 1 then
    from = 'waiting'
  end
  if not from then return false end
  to_cancelled(prefix, k_dead, k_metrics, job, reason, from, f[3], f[4], now)
  if from == 'waiting' then
    cancel_children(prefix, k_pending, k_schedule, k_active, k_dead, k_metrics,
      redis.call('HGETALL', prefix .. 'flow:' .. job), reason, now)
  end
  if f[7] then flow_child_done(prefix, k_pending, f[7], job, 'cancelled', '', f[8], now) end
  return from
end

local function waiting_job(k_pending, k_schedule, id, ...)
  local f = redis.call('HMGET', lane_prefix .. 'job:' .. id, 'state', 'lane', ...)
  if not f[1] then return false, redis.error_reply('EMQNOJOB ' .. id .. ' does not exist') end
  local lane = lane_of(f[2])
  local where = false
  if f[1] == 'pending' and redis.call('ZSCORE', lane_pending_key(k_pending, lane), id) then
    where = 'pending'
  elseif f[1] == 'scheduled' and redis.call('ZSCORE', k_schedule, id) then
    where = 'schedule'
  end
  if not where then
    return false, redis.error_reply('EMQNOTWAITING ' .. id .. ' is ' .. f[1] ..
      ', not pending or scheduled: nothing was changed')
  end
  return where, lane, {unpack(f, 3)}
end

local function row_fields(name, payload, state, priority, max_attempts, lane)
  local fields = {'name', name, 'payload', payload, 'state', state, 'priority', priority,
    'max_attempts', max_attempts}
  if lane and lane ~= '' then fields[#fields + 1], fields[#fields + 2] = 'lane', lane end
  return fields
end

local function known_lanes()
  local seen, names = {[DEFAULT_LANE] = true}, {DEFAULT_LANE}
  local p = lane_prefix .. 'lanes:'
  for _, list in ipairs({redis.call('ZRANGE', p .. 'ring', 0, -1),
      redis.call('ZRANGE', p .. 'later', 0, -1), redis.call('SMEMBERS', p .. 'full'),
      redis.call('HKEYS', p .. 'conf')}) do
    for _, lane in ipairs(list) do
      if not seen[lane] then
        seen[lane] = true
        names[#names + 1] = lane
      end
    end
  end
  return names
end

local function finish(reply)
  lanes_flush()
  if ev_emitted and ev_max > 0 and redis.call('EXISTS', ev_key .. ':archived') == 0 then
    redis.call('XTRIM', ev_key, 'MAXLEN', '~', ev_max)
  end
  return reply
end

