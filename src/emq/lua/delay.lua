-- delay: active -> pending | schedule, without spending an attempt (| dead, if cancelled)
--
-- Gives leases back: a worker shutting down returns jobs it claimed but never started, or a
-- handler asks to run later, or raised RateLimited: then its lane (or the whole queue) is
-- also held, so no claim serves it for hold_ms, fleet-wide. The attempt the claim counted is
-- taken back with HINCRBY -1; the token is not, so tokens stay strictly increasing. Safety
-- belt: the same fence as complete (in active, unexpired, token equal); the job goes back to
-- its own lane. A job whose row has 'cancel' (cancel.lua) is not given back: it ends dead,
-- cancelled (includes/cancel.lua to_cancelled), keeping the attempt it had; a flow's child
-- so cancelled is counted for its parent as 'cancelled' (docs/flows.md), as fail does.
--
-- KEYS[1] active     ZSET    leased jobs, score = lease deadline ms
-- KEYS[2] pending    ZSET    waiting jobs, score = priority
-- KEYS[3] schedule   ZSET    delayed jobs, score = run-at ms
-- KEYS[4] events     STREAM  lifecycle events
-- KEYS[5] wake       LIST    wake-up tokens for parked workers
-- KEYS[6] meta       HASH    queue flags (lanes, vtime, concurrency, held_until)
-- KEYS[7] dead       ZSET    dead jobs, score = ms of death (a cancelled job goes there)
-- ARGV[1] prefix     string  the queue's key prefix, emq:{<queue>}:
-- ARGV[2] maxlen     integer event stream cap (~); 0 = no events; -1 = never trim
-- ARGV[3..] (id, token, delay_ms, hold_ms, hold)*  one group per job; delay_ms 0 = back to
--           pending now; hold_ms > 0 holds the lane named by hold ('*' = the whole queue)
--           until now + hold_ms (a longer hold already set is kept)
-- Returns: array, per job: 'pending' | 'scheduled' | 'cancelled' (its row has a cancel:
--   dead, cancelled, not given back; a hold asked for still applies) | 'lost' (a lease_lost
--   event is appended) | 'gone' (no row: completed or removed)
-- Errors: none
-- Derives: packed HASH (read only: a job without a row that waits packed is 'lost'),
--   job:<id> HASH, lane:<L>:pending ZSET, lane:<L>:active SET, lanes:ring ZSET,
--   lanes:later ZSET, lanes:full SET, metrics HASH (cancelled), done:<id> LIST,
--   events:archived STRING (read only), flow:<parent> HASH, flow:<parent>:results HASH,
--   waiting ZSET, outbox HASH (a cancelled flow's child: docs/flows.md)
-- Includes: answers, cancel, clock, events, flows, lanes, wake
local k_active = KEYS[1]
local k_pending = KEYS[2]
local k_schedule = KEYS[3]
local k_events = KEYS[4]
local k_wake = KEYS[5]
local k_meta = KEYS[6]
local k_dead = KEYS[7]
local prefix = ARGV[1]
local maxlen = tonumber(ARGV[2])

use_events(k_events, maxlen)
use_lanes(prefix, k_meta)

local now = server_ms()
local out = {}
local ready = 0
local holds = {}  -- lane (or '*') -> until ms (server clock)
for i = 3, #ARGV, 5 do
  local id, token, delay = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local hold_ms, hold = tonumber(ARGV[i + 3]), ARGV[i + 4]
  local score = redis.call('ZSCORE', k_active, id)
  local row = prefix .. 'job:' .. id
  local f = redis.call('HMGET', row, 'token', 'priority', 'lane', 'cancel', 'waiters',
    'attempts', 'lifo', 'state', 'parent', 'on_failure')
  if not f[8] and no_job(prefix, id) then
    out[#out + 1] = ANSWER.gone
  elseif score and tonumber(score) > now and f[1] == token and f[4] then
    redis.call('ZREM', k_active, id)  -- a cancel was requested: it is not given back
    lane_release(f[3], id)
    if hold_ms > 0 then holds[hold] = math.max(holds[hold] or 0, now + hold_ms) end
    to_cancelled(prefix, k_dead, prefix .. 'metrics', id, f[4], 'active', f[6], f[5], now)
    if f[9] then flow_child_done(prefix, k_pending, f[9], id, 'cancelled', '', f[10], now) end
    out[#out + 1] = ANSWER.cancelled
  elseif score and tonumber(score) > now and f[1] == token then
    redis.call('ZREM', k_active, id)
    lane_release(f[3], id)
    if hold_ms > 0 then holds[hold] = math.max(holds[hold] or 0, now + hold_ms) end
    local attempts = redis.call('HINCRBY', row, 'attempts', -1)
    if delay > 0 then
      redis.call('HSET', row, 'state', 'scheduled')
      redis.call('ZADD', k_schedule, now + delay, id)
      out[#out + 1] = ANSWER.scheduled
    else
      redis.call('HSET', row, 'state', 'pending')
      to_pending(k_pending, id, f[2], f[3], f[7])
      ready = ready + 1
      out[#out + 1] = ANSWER.pending
    end
    emit('event', 'delayed', 'job', id, 'attempts', attempts, 'delay_ms', delay)
  else
    out[#out + 1] = ANSWER.lost
    emit('event', 'lease_lost', 'job', id, 'token', token, 'via', 'delay')
  end
end
for hold, till in pairs(holds) do
  if hold == '*' then
    if tonumber(redis.call('HGET', k_meta, 'held_until') or '0') < till then
      redis.call('HSET', k_meta, 'held_until', till)
    end
    emit('event', 'rate_limited', 'lane', '*', 'until', till, 'by', 'handler')
  else
    if not lane_mode then lanes_on(k_pending) end
    redis.call('ZADD', prefix .. 'lanes:later', 'GT', till + 1, hold)  -- served after till
    redis.call('ZREM', prefix .. 'lanes:ring', hold)
    redis.call('SREM', prefix .. 'lanes:full', hold)
    lane_ready[hold] = nil
    emit('event', 'rate_limited', 'lane', hold, 'until', till, 'by', 'handler')
  end
end
wake(k_wake, ready)
return finish(out)
