-- enqueue: (new) -> pending | schedule
--
-- Admits one or many jobs in one indivisible step. A job with delay_ms > 0 goes to schedule
-- (score = run-at ms, server clock), the others to their lane's waiting set (score =
-- priority; the default lane's is pending) and their lane into the ring. Safety belt:
-- every id and dedup key is checked before the first write, so a conflict anywhere in the
-- batch writes nothing; an id that already exists with the same name and payload is the
-- idempotent retry of a lost reply and is reported as a duplicate, never written twice.
-- A call that ran leaves admitted:<request> for 60 s (SET NX PX, first of all; a refused
-- call deletes it): a resend of the same call (the producer's retry after a lost reply)
-- then admits nothing and reports every job as a duplicate, even when a worker has since
-- completed a job and its row is gone, so the job does not run again.
-- A lifo job (its row gets lifo = 1) enters ahead of the FIFO jobs of its priority, the
-- newest first (includes/lanes.lua lifo_score; one HINCRBY of meta lifo_seq per call with
-- lifo jobs). In layout 3 a job of the common case (priority 0, default lane, no delay,
-- dedup or lifo, lane mode off) is packed instead of getting a row: one HSET of packed and
-- one RPUSH of ready per call (includes/packed.lua).
--
-- KEYS[1] pending    ZSET    waiting jobs, score = priority
-- KEYS[2] schedule   ZSET    delayed jobs, score = run-at ms
-- KEYS[3] events     STREAM  lifecycle events
-- KEYS[4] wake       LIST    wake-up tokens for parked workers
-- KEYS[5] meta       HASH    queue flags (lanes: lane mode, turned on by the first lane job)
-- ARGV[1] prefix     string  the queue's key prefix, emq:{<queue>}:
-- ARGV[2] maxlen     integer event stream cap (~); 0 = no events; -1 = never trim
-- ARGV[3] trace      string  the producer span's W3C traceparent, stored in each new row as
--                            trace; '' (OpenTelemetry not active) stores nothing
-- ARGV[4] request    string  names the call; a resend carries the same one
-- ARGV[5] compact    string  '': full groups; else every job's max_attempts, and the groups
--                            are (id, name, payload) only: priority 0, no delay, dedup key,
--                            lane or lifo (the common case, a third of the arguments)
-- ARGV[6..] (id, name, payload, priority, max_attempts, delay_ms, dedup, lane, lifo)*  one
--           group per job (compact: (id, name, payload)*); delay_ms in ms; dedup is '' for
--           none; lane is '' for the default lane; lifo is '1' for a lifo job, '' for FIFO
-- Returns: flat array, per job: id (the existing id on a dedup hit), 1 created | 0 duplicate
-- Errors: EMQCONFLICT <id> when an id exists (or repeats in the batch) with another name
--         or payload, or a dedup key's job differs from the one given
-- Derives: job:<id> HASH, de:<dedup> STRING, admitted:<request> STRING (60 s),
--   packed HASH, ready LIST (layout 3: packed jobs),
--   lane:<L>:pending ZSET, lanes:ring ZSET,
--   lane:default:active SET (when lane mode turns on), events:archived STRING (read only),
--   active ZSET, dead ZSET, metrics HASH (read only: whether the queue is new, its layout)
-- Includes: clock, events, lanes, layout, packed, rows, wake
local k_pending = KEYS[1]
local k_schedule = KEYS[2]
local k_events = KEYS[3]
local k_wake = KEYS[4]
local k_meta = KEYS[5]
local prefix = ARGV[1]
local maxlen = tonumber(ARGV[2])
local trace = ARGV[3]
local request = ARGV[4]
local compact = ARGV[5]
local k_admitted = prefix .. 'admitted:' .. request
local GROUP = compact == '' and 9 or 3
local FIRST = 6  -- ARGV index of the first group

-- the group at ARGV index i beyond (id, name, payload): priority, max_attempts, delay_ms
-- (a number), dedup, lane, lifo
local function job_at(i)
  if compact ~= '' then return '0', compact, 0, '', '', '' end
  return ARGV[i + 3], ARGV[i + 4], tonumber(ARGV[i + 5]), ARGV[i + 6], ARGV[i + 7], ARGV[i + 8]
end
local RESEND_MS = 60000  -- how long a call that ran is known by its request

use_events(k_events, maxlen)
use_lanes(prefix, k_meta)  -- first: it refuses a newer keyspace layout before any write

-- a resend of a call that landed: every job was admitted then, whatever became of it since
if not redis.call('SET', k_admitted, '1', 'PX', RESEND_MS, 'NX') then
  local out = {}
  for i = FIRST, #ARGV, GROUP do
    local _, _, _, dedup = job_at(i)
    out[#out + 1] = (dedup ~= '' and redis.call('GET', prefix .. 'de:' .. dedup)) or ARGV[i]
    out[#out + 1] = 0
  end
  return out
end

local now = false  -- the server clock, read once a delayed job needs it

-- pass 1: decide every job, write nothing. One EXISTS over the whole batch's rows: when it
-- finds none (the common case: fresh ids), no job needs its own check.
local rows, ids = {}, {}
for i = FIRST, #ARGV, GROUP do
  ids[#ids + 1] = ARGV[i]
  rows[#ids] = prefix .. 'job:' .. ARGV[i]
end
local none_exist = redis.call('EXISTS', unpack(rows)) == 0
local packed_now = {}  -- layout 3: each job's packed entry, if its id waits packed
if queue_layout >= 3 then packed_now = redis.call('HMGET', prefix .. 'packed', unpack(ids)) end
local targets, created = {}, {}  -- per job: the id it resolves to, 1 new | 0 duplicate
local seen = {}  -- id -> ARGV index of the job in this batch that creates it
local seen_dedup = {}
local lifos = 0  -- lifo jobs created (an upper bound of the lifo numbers pass 2 takes)
for i = FIRST, #ARGV, GROUP do
  local id, name, payload = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local _, _, _, dedup, _, lifo = job_at(i)
  local target, new = id, 1
  if dedup ~= '' then
    local holder = seen_dedup[dedup] or redis.call('GET', prefix .. 'de:' .. dedup)
    if holder and (seen[holder] or redis.call('EXISTS', prefix .. 'job:' .. holder) == 1) then
      target, new = holder, 0
    end
  end
  if new == 1 then
    local same
    local first = seen[id]
    local entry = packed_now[#targets + 1]
    if first then
      same = ARGV[first + 1] == name and ARGV[first + 2] == payload
    elseif entry then
      local cur_name, _, _, cur_payload = unpack_entry(entry)
      same = cur_name == name and cur_payload == payload
    elseif not none_exist and redis.call('EXISTS', prefix .. 'job:' .. id) == 1 then
      local cur = redis.call('HMGET', prefix .. 'job:' .. id, 'name', 'payload')
      same = cur[1] == name and cur[2] == payload
    end
    if same == false then
      redis.call('DEL', k_admitted)  -- a refused call admitted nothing: its resend is refused too
      return redis.error_reply('EMQCONFLICT ' .. id .. ' exists with another name or payload')
    elseif same then
      new = 0
    else
      seen[id] = i
      if dedup ~= '' then seen_dedup[dedup] = id end
    end
  end
  if new == 1 and lifo == '1' then lifos = lifos + 1 end
  targets[#targets + 1] = target
  created[#created + 1] = new
end

-- pass 2: write
for n = 1, #targets do
  if created[n] == 1 then
    new_queue_layout(prefix)  -- the queue's first job: a new queue starts in the newest layout
    break
  end
end
local out = {}
local waiting = {}  -- lane -> score, member pairs for one ZADD (at most 1,000 jobs per call)
local lanes = {}  -- the lanes in the order they first appear
local ready = 0
local packs, pack_ids = {}, {}  -- id, entry pairs for one HSET of packed; ids for ready
local seq = 0  -- the next lifo number
if lifos > 0 then seq = lifo_seq(lifos) end
-- a new job with a row: in schedule, or in its lane's waiting set (one ZADD per lane, below)
local function admit_row(id, row, i, state)
  local name, payload = ARGV[i + 1], ARGV[i + 2]
  local priority, max_attempts, delay, dedup, lane, lifo = job_at(i)
  local fields = row_fields(name, payload, state, priority, max_attempts, lane)
  if dedup ~= '' then
    fields[#fields + 1], fields[#fields + 2] = 'dedup', dedup
    redis.call('SET', prefix .. 'de:' .. dedup, id)
  end
  if trace ~= '' then fields[#fields + 1], fields[#fields + 2] = 'trace', trace end
  local score = priority
  if lifo == '1' then
    fields[#fields + 1], fields[#fields + 2] = 'lifo', '1'
    if delay == 0 then
      score = lifo_score(priority, seq)
      seq = seq + 1
    end
  end
  redis.call('HSET', row, unpack(fields))
  if delay > 0 then
    now = now or server_ms()
    redis.call('ZADD', k_schedule, now + delay, id)
  else
    ready = ready + 1
    local set = waiting[lane]
    if not set then
      set = {}
      waiting[lane] = set
      lanes[#lanes + 1] = lane
    end
    set[#set + 1] = score
    set[#set + 1] = id
  end
end

for n, id in ipairs(targets) do
  local i = FIRST + (n - 1) * GROUP
  if created[n] == 1 then
    local priority, max_attempts, delay, dedup, lane, lifo = job_at(i)
    local state = 'pending'
    if delay > 0 then state = 'scheduled' end
    if packable(queue_layout, lane_mode, priority, delay, dedup, lane, lifo) then
      packs[#packs + 1] = id
      packs[#packs + 1] = pack_entry(ARGV[i + 1], max_attempts, trace, ARGV[i + 2])
      pack_ids[#pack_ids + 1] = id
      ready = ready + 1
    else
      admit_row(id, rows[n], i, state)
    end
    emit('event', 'enqueued', 'job', id, 'attempts', '0', 'name', ARGV[i + 1], 'state', state)
  end
  out[#out + 1] = id
  out[#out + 1] = created[n]
end

if #packs > 0 then
  redis.call('HSET', prefix .. 'packed', unpack(packs))
  redis.call('RPUSH', prefix .. 'ready', unpack(pack_ids))
end
for _, lane in ipairs(lanes) do
  local set = waiting[lane]
  if lane == '' and not lane_mode then
    redis.call('ZADD', k_pending, unpack(set))
  else
    lane = lane_of(lane)
    if not lane_mode then lanes_on(k_pending) end
    redis.call('ZADD', lane_pending_key(k_pending, lane), unpack(set))
    lane_ready[lane] = true
  end
end
wake(k_wake, ready)
return finish(out)
