-- delay: active -> pending | schedule, without spending an attempt
--
-- Gives leases back: a worker shutting down returns jobs it claimed but never started, or a
-- handler asks to run later. The attempt the claim counted is taken back with HINCRBY -1;
-- the token is not, so tokens stay strictly increasing. Safety belt: the same fence as
-- complete (in active, unexpired, token equal).
--
-- KEYS[1] active     ZSET    leased jobs, score = lease deadline ms
-- KEYS[2] pending    ZSET    waiting jobs, score = priority
-- KEYS[3] schedule   ZSET    delayed jobs, score = run-at ms
-- KEYS[4] events     STREAM  lifecycle events
-- KEYS[5] wake       LIST    wake-up tokens for parked workers
-- ARGV[1] prefix     string  the queue's key prefix, emq:{<queue>}:
-- ARGV[2] maxlen     integer event stream cap (~); 0 = no events; -1 = never trim
-- ARGV[3..] (id, token, delay_ms)*  one group per job; delay_ms 0 = back to pending now
-- Returns: array, per job: 'pending' | 'scheduled' | 'lost' (a lease_lost event is appended) |
--   'gone' (no row: completed or removed)
-- Errors: none
-- Derives: job:<id> HASH, events:archived STRING (read only)
local k_active = KEYS[1]
local k_pending = KEYS[2]
local k_schedule = KEYS[3]
local k_events = KEYS[4]
local k_wake = KEYS[5]
local prefix = ARGV[1]
local maxlen = tonumber(ARGV[2])

use_events(k_events, maxlen)

local now = server_ms()
local out = {}
local ready = 0
for i = 3, #ARGV, 3 do
  local id, token, delay = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local score = redis.call('ZSCORE', k_active, id)
  local row = prefix .. 'job:' .. id
  local f = redis.call('HMGET', row, 'token', 'priority')
  if not f[1] then
    out[#out + 1] = ANSWER.gone
  elseif score and tonumber(score) > now and f[1] == token then
    redis.call('ZREM', k_active, id)
    local attempts = redis.call('HINCRBY', row, 'attempts', -1)
    if delay > 0 then
      redis.call('HSET', row, 'state', 'scheduled')
      redis.call('ZADD', k_schedule, now + delay, id)
      out[#out + 1] = ANSWER.scheduled
    else
      redis.call('HSET', row, 'state', 'pending')
      redis.call('ZADD', k_pending, f[2], id)
      ready = ready + 1
      out[#out + 1] = ANSWER.pending
    end
    emit('event', 'delayed', 'job', id, 'attempts', attempts, 'delay_ms', delay)
  else
    out[#out + 1] = ANSWER.lost
    emit('event', 'lease_lost', 'job', id, 'token', token, 'via', 'delay')
  end
end
wake(k_wake, ready)
return finish(out)
