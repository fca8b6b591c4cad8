-- fail: active -> schedule (retry after a backoff) | dead (attempts spent, or no retry)
--
-- Records a failed attempt for jobs whose lease the caller still holds. While attempts <
-- max_attempts and retry = 1 the job waits in schedule (server clock) for
-- min(cap_ms, base_ms * factor^(attempts-1)) * (1 - draw), evaluated on the row's own
-- attempts; otherwise it is dead-lettered with last_error. A job whose row has 'cancel' (a
-- cancel asked for while it was leased) is never retried: it ends dead, cancelled
-- (includes/cancel.lua to_cancelled), whatever the caller asked, and is counted in
-- cancelled, not failed (a cancelled attempt is not a failure). Safety belt: the same
-- fence as complete (in active, unexpired, token equal); a stale worker's failure changes
-- nothing.
--
-- KEYS[1] active     ZSET    leased jobs, score = lease deadline ms
-- KEYS[2] schedule   ZSET    delayed jobs, score = run-at ms
-- KEYS[3] dead       ZSET    dead jobs, score = ms of death
-- KEYS[4] metrics    HASH    counters (failed, dead, cancelled)
-- KEYS[5] events     STREAM  lifecycle events
-- KEYS[6] meta       HASH    queue flags (lanes, vtime, concurrency)
-- ARGV[1] prefix     string  the queue's key prefix, emq:{<queue>}:
-- ARGV[2] maxlen     integer event stream cap (~); 0 = no events; -1 = never trim
-- ARGV[3..] (id, token, error, retry, base_ms, cap_ms, factor, draw)*  one group per job;
--           retry 1 = may retry, 0 = dead now; base_ms and cap_ms in ms; factor 1 = fixed,
--           2 = exponential; draw in [0, 1) is the jitter fraction taken off the delay
-- Returns: array, per job: 'scheduled' | 'dead' | 'cancelled' (its row has a cancel: dead,
--   cancelled, never retried; see cancel.lua) | 'lost' (a lease_lost event is appended) |
--   'gone' (no row: completed or removed)
-- Errors: none
-- Derives: packed HASH (read only: a job without a row that waits packed is 'lost'),
--   job:<id> HASH, flow:<parent> HASH, flow:<parent>:results HASH, waiting ZSET,
--   pending ZSET, dead ZSET, metrics HASH (a flow's child: docs/flows.md),
--   lane:<L>:active SET, lanes:full SET, lanes:ring ZSET, wake LIST,
--   done:<id> LIST (result() waiters of a dead job), events:archived STRING (read only)
-- Includes: answers, cancel, clock, events, flows, lanes, waiters
local k_active = KEYS[1]
local k_schedule = KEYS[2]
local k_dead = KEYS[3]
local k_metrics = KEYS[4]
local k_events = KEYS[5]
local k_meta = KEYS[6]
local prefix = ARGV[1]
local maxlen = tonumber(ARGV[2])

use_events(k_events, maxlen)
use_lanes(prefix, k_meta)

local now = server_ms()
local out = {}
for i = 3, #ARGV, 8 do
  local id, token, err, retry = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local base, cap = tonumber(ARGV[i + 4]), tonumber(ARGV[i + 5])
  local factor, draw = tonumber(ARGV[i + 6]), tonumber(ARGV[i + 7])
  local score = redis.call('ZSCORE', k_active, id)
  local row = prefix .. 'job:' .. id
  local f = redis.call('HMGET', row, 'token', 'attempts', 'max_attempts', 'name', 'payload',
    'stalled', 'lane', 'waiters', 'cancel', 'parent', 'on_failure', 'state')
  if not f[12] and no_job(prefix, id) then
    out[#out + 1] = ANSWER.gone
  elseif score and tonumber(score) > now and f[1] == token then
    redis.call('ZREM', k_active, id)
    lane_release(f[7], id)
    local attempts = tonumber(f[2] or '0')
    if f[9] then  -- a cancel was requested: no retry, whatever the caller asked; not a failure
      to_cancelled(prefix, k_dead, k_metrics, id, f[9], 'active', f[2], f[8], now)
      if f[10] then
        flow_child_done(prefix, prefix .. 'pending', f[10], id, 'cancelled', '', f[11], now)
      end
      out[#out + 1] = ANSWER.cancelled
    elseif retry == '1' and attempts < tonumber(f[3]) then
      redis.call('HINCRBY', k_metrics, 'failed', 1)
      local delay = math.min(cap, base * factor ^ math.max(0, attempts - 1))
      delay = math.floor(delay * (1 - draw))
      redis.call('HSET', row, 'state', 'scheduled', 'last_error', err)
      redis.call('ZADD', k_schedule, now + delay, id)
      out[#out + 1] = ANSWER.scheduled
      emit('event', 'retrying', 'job', id, 'attempts', attempts, 'error', err, 'delay_ms', delay)
    else
      redis.call('HINCRBY', k_metrics, 'failed', 1)
      redis.call('HSET', row, 'state', 'dead', 'last_error', err, 'died_at', now)
      redis.call('ZADD', k_dead, now, id)
      redis.call('HINCRBY', k_metrics, 'dead', 1)
      if f[8] then tell_waiters(prefix, id, f[8], 'dead', err) end
      out[#out + 1] = ANSWER.dead
      emit('event', 'dead', 'job', id, 'attempts', attempts, 'error', err, 'name', f[4],
        'payload', f[5], 'stalled', f[6] or '0')
      if f[10] then
        flow_child_done(prefix, prefix .. 'pending', f[10], id, 'dead', '', f[11], now)
      end
    end
  else
    out[#out + 1] = ANSWER.lost
    emit('event', 'lease_lost', 'job', id, 'token', token, 'via', 'fail')
  end
end
return finish(out)
