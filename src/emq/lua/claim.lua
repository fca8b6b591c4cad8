-- claim: pending -> active (and due schedule -> pending first)
--
-- Leases up to count jobs under one reading of the server clock. Due scheduled jobs are
-- promoted first, so a retry's backoff ends on time without a separate beat. Safety belt:
-- the pause flag and every limit are read here, inside the same step as the pop (a paused or
-- limited queue returns no jobs, not an error); attempts is bumped and the token derived
-- here, in this step, never written by a client; the lease deadline is now + lease_ms on the server
-- clock. A call carrying a request id stores its reply for lease_ms (at most 60 s): a resend
-- of the same call (a retry after a lost reply) gets the same jobs back instead of leasing
-- more and stranding the first ones.
--
-- Limits (docs/lanes.md): the queue's concurrency counts its leased jobs (ZCARD active), a
-- lane's counts lane:<L>:active, whose members are checked against active before they refuse
-- a claim, so a slot can not leak. A rate (max, per_ms) allows a claim at now only while
-- fewer than max claims lie in [now - per_ms, now]: every claim is logged in a ZSET. (The
-- window is one ms wider than per_ms, and a hold ends one ms after its end, so the limits hold
-- on the events' stream ids too, which may read the clock up to a ms before TIME does.) In lane
-- mode the lanes in lanes:ring are served by stride scheduling: the lane with the lowest pass
-- gets the next job and its pass grows by 1/weight; a lane that is paused, held, at its
-- concurrency limit or out of rate leaves the ring (for conf, lanes:later or lanes:full).
-- The default lane's waiting jobs are pending's and, in layout 3, the packed ones (ready),
-- merged in claim order (includes/packed.lua pop_waiting); a packed job's row is made here,
-- in one HSET.
--
-- KEYS[1] pending    ZSET    waiting jobs of the default lane, score = priority
-- KEYS[2] active     ZSET    leased jobs, score = lease deadline ms
-- KEYS[3] schedule   ZSET    delayed jobs, score = run-at ms
-- KEYS[4] meta       HASH    queue flags and limits (paused, lanes, concurrency, rate, ...)
-- KEYS[5] events     STREAM  lifecycle events
-- KEYS[6] metrics    HASH    counters (missing)
-- ARGV[1] prefix     string  the queue's key prefix, emq:{<queue>}:
-- ARGV[2] maxlen     integer event stream cap (~); 0 = no events; -1 = never trim
-- ARGV[3] count      integer most jobs to lease, 1..1000
-- ARGV[4] lease_ms   integer lease length in ms, > 0
-- ARGV[5] request    string  the call's request id, '' for none
-- ARGV[6] worker     string  the claiming worker's registry id, stored as the row's 'worker'
--                            ('' or absent: the field is cleared)
-- Returns: flat array: deadline ms, the ids found without their row (an evicted or hand-deleted
--          row, or a packed entry not in its shape: dropped from the set, counted in metrics
--          'missing', a 'missing' event each),
--          retry_in ms (when fewer than count were leased because of a rate limit or a hold:
--          how long until the soonest one ends; -1 when a concurrency limit held jobs back:
--          a finishing job pushes a wake-up; 0 otherwise), then per job: id, token,
--          attempts, stalled, name, payload, lane ('' for the default lane), parent (a
--          flow's child: its parent's id, so the worker sends its result; '' otherwise),
--          trace (the producer's W3C traceparent stored by enqueue; '' for none) (token: a decimal
--          string, max(previous token + 1, server clock in us), so never issued twice for one
--          job)
-- Errors: none
-- Derives: job:<id> HASH, claim:<request> STRING (the stored reply), rate ZSET (claim log),
--   packed HASH, ready LIST (layout 3: packed jobs),
--   lanes:ring ZSET, lanes:later ZSET, lanes:full SET, lanes:conf HASH, lane:<L>:pending ZSET,
--   lane:<L>:active SET, lane:<L>:rate ZSET, wake LIST, events:archived STRING (read only)
-- Includes: clock, due, events, lanes, packed
local k_pending = KEYS[1]
local k_active = KEYS[2]
local k_schedule = KEYS[3]
local k_meta = KEYS[4]
local k_events = KEYS[5]
local k_metrics = KEYS[6]
local prefix = ARGV[1]
local maxlen = tonumber(ARGV[2])
local count = tonumber(ARGV[3])
local lease_ms = tonumber(ARGV[4])
local request = ARGV[5]
local worker = ARGV[6] or ''

use_events(k_events, maxlen)

local k_reply = prefix .. 'claim:' .. request
if request ~= '' then
  local stored = redis.call('GET', k_reply)
  if stored then return cjson.decode(stored) end
end

local now_us = server_us()
local now_token = string.format('%.0f', now_us)  -- a lease's token, unless its last was later
local now = math.floor(now_us / 1000)
local deadline = now + lease_ms
local missing = {}
local out = {deadline, missing, 0}
-- m: concurrency, paused, rate, held_until, lane_concurrency, lane_rate, limited_until
local m = use_lanes(prefix, k_meta, 'paused', 'rate', 'held_until', 'lane_concurrency',
  'lane_rate', 'limited_until')
if m[2] == '1' then return out end

local function parse_rate(text)  -- 'max:per_ms' -> max, per_ms; 0, 0 for none
  if not text or text == '' then return 0, 0 end
  local most, per = string.match(text, '^(%d+):(%d+)$')
  return tonumber(most), tonumber(per)
end

-- free claims now (up to want) under a rate (most, per) logged in k_log, and when the next
-- one frees up. Entries that left the window are trimmed only when the log could bind: a
-- log shorter than most - want can not refuse any of want, stale entries or not.
local function rate_room(k_log, most, per, want)
  local n = redis.call('ZCARD', k_log)
  if n + want <= most then return most - n, 0 end
  n = n - redis.call('ZREMRANGEBYSCORE', k_log, '-inf', '(' .. (now - per))
  if n < most then return most - n, 0 end
  local oldest = redis.call('ZRANGE', k_log, n - most, n - most, 'WITHSCORES')
  return 0, tonumber(oldest[2]) + per + 1
end

local function log_claims(k_log, per, members)
  if #members > 0 then
    local args = {}
    for i, member in ipairs(members) do
      args[2 * i - 1] = now
      args[2 * i] = member
    end
    redis.call('ZADD', k_log, unpack(args))
    redis.call('PEXPIRE', k_log, per + 1000)  -- outlives its newest claim's window, with room
  end
end

-- queue-wide limits: a hold (a handler's RateLimited), concurrency, rate
local want = count
local q_most, q_per = parse_rate(m[3])
local held = tonumber(m[4] or '0')
if held >= now then
  out[3] = held - now + 1
  return out
end
local q_conc = tonumber(m[1] or '0')
if q_conc > 0 then want = math.min(want, q_conc - redis.call('ZCARD', k_active)) end
if want <= 0 then
  out[3] = -1
  return out
end
if q_most > 0 then
  local free, next_at = rate_room(prefix .. 'rate', q_most, q_per, want)
  if free == 0 then
    out[3] = next_at - now
    if tonumber(m[7] or '0') ~= next_at then
      redis.call('HSET', k_meta, 'limited_until', next_at)
      emit('event', 'rate_limited', 'lane', '*', 'until', next_at, 'by', 'rate')
    end
    return finish(out)
  end
  want = math.min(want, free)
end

promote_due(prefix, k_schedule, k_pending, now, count, false, missing)

local logged = {}  -- 'id:token' of each lease, for the queue's rate log
local leased_ids = {}  -- deadline, id pairs: one ZADD into active at the end
-- one leased job's reply, its rate log entry and its event
local function leased(id, token, attempts, stalled, name, payload, lane, parent, trace)
  leased_ids[#leased_ids + 1] = deadline
  leased_ids[#leased_ids + 1] = id
  local n = #out
  out[n + 1] = id
  out[n + 2] = token
  out[n + 3] = attempts
  out[n + 4] = stalled
  out[n + 5] = name
  out[n + 6] = payload
  out[n + 7] = lane
  out[n + 8] = parent
  out[n + 9] = trace
  if q_most > 0 then logged[#logged + 1] = id .. ':' .. token end
  emit('event', 'claimed', 'job', id, 'attempts', attempts, 'token', token)
  return token
end

-- lease a packed job (layout 3): its row is made here, first attempt, token from the clock;
-- false for an entry not in the packed shape (written by hand): dropped as missing
local function lease_packed(id, entry)
  local name, max_attempts, trace, payload = unpack_entry(entry)
  if not name then
    missing[#missing + 1] = id
    emit('event', 'missing', 'job', id, 'from', 'packed')
    return false
  end
  local f = {'state', 'active', 'name', name, 'payload', payload, 'priority', '0',
    'max_attempts', max_attempts, 'attempts', '1', 'token', now_token}
  if trace ~= '' then f[#f + 1], f[#f + 2] = 'trace', trace end
  if worker ~= '' then f[#f + 1], f[#f + 2] = 'worker', worker end
  redis.call('HSET', prefix .. 'job:' .. id, unpack(f))
  return leased(id, now_token, 1, 0, name, payload, '', '', trace)
end

-- lease one popped id of lane (its row read here); false if the row is missing
local function lease(id, lane, from, entry)
  if entry then return lease_packed(id, entry) end
  local row = prefix .. 'job:' .. id
  local f = redis.call('HMGET', row, 'token', 'stalled', 'name', 'payload', 'attempts',
    'parent', 'trace', 'worker')
  if not f[3] then
    missing[#missing + 1] = id
    emit('event', 'missing', 'job', id, 'from', from)
    return false
  end
  local attempts = tonumber(f[5] or '0') + 1  -- read and written in this one step
  -- the token carries the server clock, so it is larger than any token issued before for
  -- this job, even one the server issued and then lost with a rollback of its data
  local token = now_token
  local after = tonumber(f[1] or '0') + 1
  if after > now_us then token = string.format('%.0f', after) end
  if worker ~= '' then
    redis.call('HSET', row, 'state', 'active', 'token', token, 'attempts', attempts,
      'worker', worker)
  else
    redis.call('HSET', row, 'state', 'active', 'token', token, 'attempts', attempts)
    if f[8] then redis.call('HDEL', row, 'worker') end  -- a previous run's worker
  end
  return leased(id, token, attempts, tonumber(f[2] or '0'), f[3], f[4], lane, f[6] or '',
    f[7] or '')
end

-- pops up to n waiting jobs of lane: ids and their packed entries (false: a row job)
local function pop_lane(lane, n)
  if lane == DEFAULT_LANE then return pop_waiting(prefix, k_pending, n) end
  local popped = redis.call('ZPOPMIN', lane_pending_key(k_pending, lane), n)
  local ids, entries = {}, {}
  for j = 1, #popped, 2 do
    ids[#ids + 1] = popped[j]
    entries[#ids] = false
  end
  return ids, entries
end

-- a binary heap of lane indexes ordered by (pass, index), passes in their own array: the
-- stride scheduler's queue (comparisons inline: this runs once per job)
local function heap_push(heap, pass, i)
  local c = #heap + 1
  heap[c] = i
  local pi = pass[i]
  while c > 1 do
    local p = math.floor(c / 2)
    local j = heap[p]
    local pj = pass[j]
    if pj < pi or (pj == pi and j < i) then break end
    heap[c], heap[p] = j, i
    c = p
  end
end
local function heap_pop(heap, pass)
  local top, n = heap[1], #heap
  local i = heap[n]
  heap[n] = nil
  n = n - 1
  if n == 0 then return top end
  local pi, c = pass[i], 1
  while 2 * c <= n do  -- c at least doubles each turn
    local s, ps = 2 * c, pass[heap[2 * c]]
    local r = s + 1
    if r <= n then
      local pr = pass[heap[r]]
      if pr < ps or (pr == ps and heap[r] < heap[s]) then s, ps = r, pr end
    end
    if pi < ps or (pi == ps and i < heap[s]) then break end
    heap[c] = heap[s]
    c = s
  end
  heap[c] = i
  return top
end

local d_conc = tonumber(m[5] or '0')
local d_most, d_per = parse_rate(m[6])
local k_ring, k_later = prefix .. 'lanes:ring', prefix .. 'lanes:later'
local k_full = prefix .. 'lanes:full'

-- a lane's settings: weight, concurrency, rate max, rate per_ms, paused (its own, else the
-- queue's per-lane defaults)
local function settings(text)
  if not text then return 1, d_conc, d_most, d_per, false end
  local w, c, most, per, paused = string.match(text, '^(%S+) (%d+) (%d+) (%d+) (%d)$')
  c, most, per = tonumber(c), tonumber(most), tonumber(per)
  if c == 0 then c = d_conc end
  if most == 0 then most, per = d_most, d_per end
  return tonumber(w), c, most, per, paused == '1'
end

-- leased jobs of a lane, after dropping members that are no longer in active (only when they
-- would refuse a claim): derived from what is really leased, so a slot can not leak
local function running(lane, limit)
  local k = lane_key(lane, 'active')
  local n = redis.call('SCARD', k)
  if n >= limit then
    local members = redis.call('SMEMBERS', k)
    local scores = redis.call('ZMSCORE', k_active, unpack(members))
    for i, id in ipairs(members) do
      if not scores[i] then
        redis.call('SREM', k, id)
        n = n - 1
      end
    end
  end
  return n
end

local served = 0
if not lane_mode then
  local ids, entries = pop_waiting(prefix, k_pending, want)
  for i, id in ipairs(ids) do
    if lease(id, '', 'pending', entries[i]) then served = served + 1 end
  end
else
  local back = redis.call('ZRANGEBYSCORE', k_later, '-inf', now, 'LIMIT', 0, 1000)
  if #back > 0 then
    redis.call('ZREM', k_later, unpack(back))
    for _, lane in ipairs(back) do lane_ready[lane] = true end
  end
  lanes_flush()
  local vtime = tonumber(lane_vtime)
  local rounds = 0
  while served < want and rounds < 16 do
    rounds = rounds + 1
    local need = want - served
    local win = redis.call('ZRANGE', k_ring, 0, need, 'WITHSCORES')
    local n = #win / 2
    if n == 0 then break end
    local bound = math.huge  -- lanes past the window have a pass of at least this
    if n > need then
      bound = tonumber(win[2 * n])
      n = need
    end
    -- per lane i: names, pass, stride, cap (most jobs now), take, conc, run, most, per
    local names, pass, stride, cap, take = {}, {}, {}, {}, {}
    local conc, run, most, per = {}, {}, {}, {}
    for i = 1, n do
      names[i] = win[2 * i - 1]
      pass[i] = tonumber(win[2 * i])
    end
    local confs = redis.call('HMGET', prefix .. 'lanes:conf', unpack(names))
    local holds = redis.call('ZMSCORE', k_later, unpack(names))
    local heap, drop, eligible, once = {}, {}, {}, true
    for i = 1, n do
      local lane = names[i]
      local w, c, m_, p_, paused = settings(confs[i])
      local room = need
      stride[i], take[i], conc[i], run[i], most[i], per[i] = 1 / w, 0, c, 0, m_, p_
      if paused or (holds[i] and tonumber(holds[i]) > now) then
        room = 0
      else
        if c > 0 then
          local r = running(lane, c)
          run[i] = r
          if r >= c then
            room = 0
            redis.call('SADD', k_full, lane)
          elseif c - r < room then
            room = c - r
          end
        end
        if room > 0 and m_ > 0 then
          local free, next_at = rate_room(lane_key(lane, 'rate'), m_, p_, room)
          if free == 0 then
            room = 0
            redis.call('ZADD', k_later, next_at, lane)
            emit('event', 'rate_limited', 'lane', lane, 'until', next_at, 'by', 'rate')
          elseif free < room then
            room = free
          end
        end
      end
      cap[i] = room
      if room > 0 then
        eligible[#eligible + 1] = i
        if pass[i] + stride[i] <= bound then once = false end
      else
        drop[#drop + 1] = lane
      end
    end
    local picks = 0
    if once then  -- no lane can have a second turn before the boundary: one each, in order
      for _, i in ipairs(eligible) do
        take[i], vtime, pass[i] = 1, pass[i], pass[i] + stride[i]
      end
      picks = #eligible
    else
      for _, i in ipairs(eligible) do heap_push(heap, pass, i) end
    end
    while picks < need and #heap > 0 and pass[heap[1]] <= bound do
      local i = heap_pop(heap, pass)
      take[i] = take[i] + 1
      picks = picks + 1
      vtime = pass[i]
      pass[i] = pass[i] + stride[i]
      if take[i] < cap[i] then heap_push(heap, pass, i) end
    end
    local passes = {}
    for i = 1, n do
      if take[i] > 0 then
        local lane = names[i]
        local ids, entries = pop_lane(lane, take[i])
        local taken, logs = {}, {}
        local shown = lane == DEFAULT_LANE and '' or lane
        for j, id in ipairs(ids) do
          local token = lease(id, shown, 'pending', entries[j])
          if token then
            taken[#taken + 1] = id
            if most[i] > 0 then logs[#logs + 1] = id .. ':' .. token end
          end
        end
        served = served + #taken
        if #taken > 0 then redis.call('SADD', lane_key(lane, 'active'), unpack(taken)) end
        if most[i] > 0 then log_claims(lane_key(lane, 'rate'), per[i], logs) end
        if #ids < take[i] then
          drop[#drop + 1] = lane  -- no more waiting jobs
        elseif conc[i] > 0 and run[i] + #taken >= conc[i] then
          drop[#drop + 1] = lane
          redis.call('SADD', k_full, lane)
        else
          passes[#passes + 1] = pass[i]
          passes[#passes + 1] = lane
        end
      end
    end
    if #drop > 0 then redis.call('ZREM', k_ring, unpack(drop)) end
    if #passes > 0 then redis.call('ZADD', k_ring, 'XX', unpack(passes)) end
    if picks == 0 and #drop == 0 then break end
  end
  redis.call('HSET', k_meta, 'vtime', vtime)
  if served < want then
    local soonest = redis.call('ZRANGE', k_later, 0, 0, 'WITHSCORES')
    if #soonest > 0 then
      out[3] = math.max(1, tonumber(soonest[2]) - now)
    elseif redis.call('SCARD', k_full) > 0 then
      out[3] = -1
    end
  end
end
if #leased_ids > 0 then redis.call('ZADD', k_active, unpack(leased_ids)) end
if q_most > 0 then log_claims(prefix .. 'rate', q_per, logged) end
if #missing > 0 then redis.call('HINCRBY', k_metrics, 'missing', #missing) end
if request ~= '' and #out > 3 then
  redis.call('SET', k_reply, cjson.encode(out), 'PX', math.min(lease_ms, 60000))
end
return finish(out)
