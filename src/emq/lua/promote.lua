-- promote: schedule -> pending (due jobs)
--
-- Moves jobs whose run-at time has come (score <= now, server clock) to pending, at most
-- limit per call. claim also promotes before it pops; this script serves the maintenance
-- beat so that due jobs wake parked workers. Safety belt: ZREM and ZADD are in this one step.
--
-- KEYS[1] schedule   ZSET    delayed jobs, score = run-at ms
-- KEYS[2] pending    ZSET    waiting jobs, score = priority
-- KEYS[3] events     STREAM  lifecycle events
-- KEYS[4] wake       LIST    wake-up tokens for parked workers
-- ARGV[1] prefix     string  the queue's key prefix, emq:{<queue>}:
-- ARGV[2] maxlen     integer event stream cap (~); 0 = no events; -1 = never trim
-- ARGV[3] limit      integer most jobs to move, 1..10000
-- Returns: array of the promoted ids
-- Errors: none
-- Derives: job:<id> HASH, events:archived STRING (read only)
local k_schedule = KEYS[1]
local k_pending = KEYS[2]
local k_events = KEYS[3]
local k_wake = KEYS[4]
local prefix = ARGV[1]
local maxlen = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])

-- events: appended by the emit function, trimmed once per call by finish (approximate MAXLEN),
-- unless an archiver owns retention (events:archived exists)
local trim = maxlen > 0 and redis.call('EXISTS', k_events .. ':archived') == 0
local emitted = false
local function emit(...)
  if maxlen ~= 0 then
    redis.call('XADD', k_events, '*', ...)
    emitted = true
  end
end
local function finish(reply)
  if emitted and trim then redis.call('XTRIM', k_events, 'MAXLEN', '~', maxlen) end
  return reply
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
local due = redis.call('ZRANGEBYSCORE', k_schedule, '-inf', now, 'LIMIT', 0, limit)
for _, id in ipairs(due) do
  local row = prefix .. 'job:' .. id
  redis.call('ZREM', k_schedule, id)
  local priority = redis.call('HGET', row, 'priority')
  if priority then
    redis.call('ZADD', k_pending, priority, id)
    redis.call('HSET', row, 'state', 'pending')
    out[#out + 1] = id
    emit('event', 'promoted', 'job', id)
  end
end
if #out > 0 then
  local tokens = {}
  for n = 1, math.min(#out, 32) do tokens[n] = '1' end
  redis.call('LPUSH', k_wake, unpack(tokens))
  redis.call('LTRIM', k_wake, 0, 31)
end
return finish(out)
