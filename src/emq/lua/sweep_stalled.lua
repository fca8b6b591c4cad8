-- sweep_stalled: active (expired lease) -> pending | dead (stalled too often, or cancelled)
--
-- The stalled recovery. Detect (deadline <= now, server clock), move and count happen in this
-- one step, so two overlapping sweeps can never both recover one lease: the second finds the
-- job already gone from active. Safety belt: every expired id is removed from active (one
-- ZREM per 1,000) and added to exactly one of pending or dead in this same step (the default
-- lane's recovered jobs with one ZADD, written before lane mode could turn on); stalled is bumped
-- with HINCRBY on the value this script reads, never by a client; attempts is not touched;
-- an id whose row is gone is dropped from active and skipped (no ghost row is created). A
-- recovered job goes back to its own lane and frees its lane's slot in the same step; when a
-- row was missing (its lane unknown), every lane parked at its concurrency limit goes back to
-- the ring, so the next claim recounts it against active (a slot can not leak).
--
-- KEYS[1] active       ZSET    leased jobs, score = lease deadline ms
-- KEYS[2] pending      ZSET    waiting jobs, score = priority
-- KEYS[3] dead         ZSET    dead jobs, score = ms of death
-- KEYS[4] metrics      HASH    counters (recovered, dead, cancelled)
-- KEYS[5] events       STREAM  lifecycle events
-- KEYS[6] wake         LIST    wake-up tokens for parked workers
-- KEYS[7] meta         HASH    queue flags (lanes, vtime, concurrency)
-- ARGV[1] prefix       string  the queue's key prefix, emq:{<queue>}:
-- ARGV[2] maxlen       integer event stream cap (~); 0 = no events; -1 = never trim
-- ARGV[3] max_stalled  integer stall count at which a job is dead-lettered; 0 = never
-- ARGV[4] limit        integer most expired leases to handle in this call, 1..10000
-- Returns: four arrays: {recovered ids}, {dead ids}, {missing ids: found without their row,
--          dropped from active, counted in metrics 'missing', a 'missing' event each},
--          {cancelled ids: their row has 'cancel' (cancel.lua): dead, cancelled
--          (includes/cancel.lua to_cancelled), not counted as a stall, never recovered}
-- Errors: none
-- Derives: job:<id> HASH, flow:<parent> HASH, flow:<parent>:results HASH, waiting ZSET,
--   pending ZSET, dead ZSET, metrics HASH (a flow's child: docs/flows.md),
--   lane:<L>:pending ZSET, lane:<L>:active SET, lanes:ring ZSET,
--   lanes:full SET, done:<id> LIST (result() waiters of a dead job), events:archived STRING
--   (read only)
-- Includes: cancel, clock, events, flows, lanes, waiters, wake
local k_active = KEYS[1]
local k_pending = KEYS[2]
local k_dead = KEYS[3]
local k_metrics = KEYS[4]
local k_events = KEYS[5]
local k_wake = KEYS[6]
local k_meta = KEYS[7]
local prefix = ARGV[1]
local maxlen = tonumber(ARGV[2])
local max_stalled = tonumber(ARGV[3])
local limit = tonumber(ARGV[4])

use_events(k_events, maxlen)
use_lanes(prefix, k_meta)

local now = server_ms()
local recovered, dead, missing, cancelled = {}, {}, {}, {}
local expired = redis.call('ZRANGEBYSCORE', k_active, '-inf', now, 'LIMIT', 0, limit)
for i = 1, #expired, 1000 do  -- every expired id leaves active first, 1,000 per ZREM
  redis.call('ZREM', k_active, unpack(expired, i, math.min(i + 999, #expired)))
end
local back = {}  -- recovered jobs of the default lane, FIFO, outside lane mode: one ZADD
local function put_back()  -- before lane mode may turn on, which reads pending
  for i = 1, #back, 2000 do
    redis.call('ZADD', k_pending, unpack(back, i, math.min(i + 1999, #back)))
  end
  back = {}
end
for _, id in ipairs(expired) do
  local row = prefix .. 'job:' .. id
  local f = redis.call('HMGET', row, 'attempts', 'priority', 'lane', 'waiters', 'cancel',
    'lifo', 'parent', 'on_failure', 'state')
  local attempts = f[1] or '0'
  if f[9] and f[5] then  -- a cancel was requested: dead, cancelled; not a stall, not recovered
    if not lane_mode then put_back() end
    lane_release(f[3], id)
    to_cancelled(prefix, k_dead, k_metrics, id, f[5], 'active', attempts, f[4], now)
    cancelled[#cancelled + 1] = id
    if f[7] then flow_child_done(prefix, k_pending, f[7], id, 'cancelled', '', f[8], now) end
  elseif f[9] then
    lane_release(f[3], id)
    local stalled = redis.call('HINCRBY', row, 'stalled', 1)
    if max_stalled > 0 and stalled >= max_stalled then
      redis.call('HSET', row, 'state', 'dead', 'last_error', 'stalled', 'died_at', now)
      redis.call('ZADD', k_dead, now, id)
      dead[#dead + 1] = id
      if f[4] then tell_waiters(prefix, id, f[4], 'dead', 'stalled') end
      local story = redis.call('HMGET', row, 'name', 'payload')
      emit('event', 'dead', 'job', id, 'attempts', attempts, 'error', 'stalled',
        'stalled', stalled, 'name', story[1], 'payload', story[2])
      if f[7] then
        if not lane_mode then put_back() end
        flow_child_done(prefix, k_pending, f[7], id, 'dead', '', f[8], now)
      end
    else
      redis.call('HSET', row, 'state', 'pending')
      if not lane_mode and not f[3] and f[6] ~= '1' then
        back[#back + 1], back[#back + 2] = f[2], id
      else
        if not lane_mode then put_back() end
        to_pending(k_pending, id, f[2], f[3], f[6])
      end
      recovered[#recovered + 1] = id
      emit('event', 'stalled', 'job', id, 'attempts', attempts, 'stalled', stalled)
    end
  else
    missing[#missing + 1] = id
    emit('event', 'missing', 'job', id, 'from', 'active')
  end
end
put_back()
if #missing > 0 then
  redis.call('HINCRBY', k_metrics, 'missing', #missing)
  if lane_mode then
    for _, lane in ipairs(redis.call('SMEMBERS', prefix .. 'lanes:full')) do
      lane_freed[lane] = lane_freed[lane] or true
    end
  end
end
if #recovered > 0 then
  redis.call('HINCRBY', k_metrics, 'recovered', #recovered)
  wake(k_wake, #recovered)
end
if #dead > 0 then redis.call('HINCRBY', k_metrics, 'dead', #dead) end
return finish({recovered, dead, missing, cancelled})
